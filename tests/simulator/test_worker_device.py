"""Where a study's workers simulate: a bare ``cuda`` spreads them over the machine's GPUs."""

import torch

from spectune.simulator._backend import worker_device


def test_a_bare_cuda_spreads_workers_round_robin_over_the_gpus():
    placed = [worker_device(torch.device("cuda"), index, 2) for index in range(5)]
    assert [str(device) for device in placed] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"]
    assert [str(worker_device(torch.device("cuda"), index, 8)) for index in (0, 7, 8)] == ["cuda:0", "cuda:7", "cuda:0"]


def test_a_pinned_gpu_the_cpu_and_a_one_gpu_machine_keep_the_documents_device():
    assert worker_device(torch.device("cuda", 1), 0, 2) == torch.device("cuda", 1)
    assert worker_device(torch.device("cpu"), 3, 2) == torch.device("cpu")
    assert worker_device(torch.device("cuda"), 3, 1) == torch.device("cuda")
