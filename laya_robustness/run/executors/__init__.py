"""Executors that score a run's rows outside the pytest process: a pool of Ray actors on a cluster.

``ray_cluster`` connects to the cluster (or starts one on this machine) and says where it is; ``ray_pool``
keeps the actors, each holding one scorer, and streams their records back. Both import Ray only when used
(the ``cluster`` extra), never when the plugin is imported.
"""
