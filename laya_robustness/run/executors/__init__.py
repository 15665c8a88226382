"""Where a run's rows are scored, behind one protocol (``base.Executor``): in this process (``local``: one chunk
after another, or a served model's requests side by side on threads) or on a pool of Ray actors on a cluster
(``ray_cluster`` connects to the cluster or starts one on this machine and says what it holds; ``ray_actor`` is
what one actor holds, the run's scorers loaded once on it; ``ray_pool`` keeps the actors, sends them shards and
streams their records back). Ray is imported only when used (the ``cluster`` extra), never when the plugin is
imported.
"""
