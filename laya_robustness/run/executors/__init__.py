"""Executors that score a run's rows outside the pytest process: a pool of Ray actors on a cluster.

``ray_cluster`` connects to the cluster (or starts one on this machine) and says what it holds; ``ray_actor``
is what one actor holds (the run's scorers, loaded once); ``ray_pool`` keeps the actors, sends them shards and
streams their records back. Both import Ray only when used
(the ``cluster`` extra), never when the plugin is imported.
"""
