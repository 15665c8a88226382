"""One GPU per xdist worker, chosen from the worker id and an outer CUDA_VISIBLE_DEVICES."""

import os

from laya_robustness.pytest_plugin.gpus import assign_worker_gpu, visible_gpus, worker_threads


def test_workers_take_the_outer_visible_gpus_in_turn():
    chosen = []
    for worker in ("gw0", "gw1", "gw2", "gw3", "gw4"):
        env = {"CUDA_VISIBLE_DEVICES": "3,5,7"}
        chosen.append(assign_worker_gpu(worker, env))
        assert env["CUDA_VISIBLE_DEVICES"] == chosen[-1]
    assert chosen == ["3", "5", "7", "3", "5"]


def test_no_visible_gpu_leaves_the_environment_alone():
    env = {"CUDA_VISIBLE_DEVICES": ""}
    assert assign_worker_gpu("gw1", env) is None and env == {"CUDA_VISIBLE_DEVICES": ""}
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": " 0 , 2 "}) == ["0", "2"]


def test_a_controller_id_is_not_a_worker():
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert assign_worker_gpu("master", env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_workers_share_the_cores_unless_the_user_pinned_threads():
    cores = os.cpu_count() or 1
    assert worker_threads(1, {}) == cores
    assert worker_threads(cores * 4, {}) == 1
    assert worker_threads(2, {"OMP_NUM_THREADS": "3"}) is None
