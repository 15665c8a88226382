"""Where a run's rows are scored, behind one protocol (``base.Executor``, with the ``base.ChunkExecutor`` it gives
per device and row source), named by ``--executor`` (``registry``: name -> factory, the options it uses and what
it checks): in this process (``local``: one chunk after another, or a served model's requests side by side on
threads) or on a pool of Ray actors on a cluster (``ray_executor``; ``ray_cluster`` connects to the cluster or
starts one on this machine and says what it holds; ``ray_actor`` is what one actor holds, the run's scorers loaded
once on it; ``ray_pool`` keeps the actors, sends them shards and streams their records back; ``ray_stream`` scores
a run's planned cells as one stream). Ray is imported only when used (the ``cluster`` extra), never when the
plugin is imported.
"""
