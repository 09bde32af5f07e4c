"""Time the PyTorch twin (``spectune.kernels.reference``), the simulator's CPU backend.

The simulator's budget is ~4 ms for a 64-request, K=4, V=4096 standard step on a 2-core CPU, so the
twin should take <= 2-3 ms for [64, 5, 4096] fp32. Usage:

    python benchmarks/reference_cpu.py [--repeats 200] [--threads 2] [--out results/file.md]

Prints a markdown table (median and best of ``repeats`` calls, ms). The machine may be shared:
the best time is the least disturbed one; the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import time

import torch

from spectune.kernels.reference import rejection_sample

CASES = [  # (label, method, draft logits?, temperature)
    ("standard one-hot", "standard", False, 0.8),
    ("standard draft logits", "standard", True, 0.8),
    ("block one-hot", "block", False, 0.8),
    ("block draft logits", "block", True, 0.8),
    ("synthetic", "synthetic", False, 0.8),
    ("greedy", "standard", False, 0.0),
]


def _inputs(num_requests: int, num_drafts: int, vocab: int, with_draft: bool, temperature: float) -> dict:
    generator = torch.Generator().manual_seed(0)
    target = torch.randn(num_requests, num_drafts + 1, vocab, generator=generator) * 2
    target[:, :, 7] += 6.0  # peaked rows: token 7 carries most of the mass, as in serving
    draft = target[:, :num_drafts] + torch.randn(num_requests, num_drafts, vocab, generator=generator) * 0.5
    drafts = torch.multinomial(torch.softmax(draft.view(-1, vocab) / max(temperature, 0.1), -1), 1, generator=generator)
    arguments = dict(
        target_logits=target,
        draft_tokens=drafts.view(num_requests, num_drafts),
        temperature=torch.full((num_requests,), temperature),
        seed=torch.arange(num_requests),
    )
    if with_draft:
        arguments["draft_logits"] = draft
    return arguments


def _time(arguments: dict, method: str, repeats: int) -> tuple[float, float]:
    extra = {}
    if method == "synthetic":
        extra["synthetic_conditional_rates"] = torch.full((arguments["draft_tokens"].shape[1],), 0.8)
    for _ in range(5):
        rejection_sample(method=method, **arguments, **extra)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rejection_sample(method=method, **arguments, **extra)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e3, times[0] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--drafts", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"# reference twin on the CPU, [{args.requests}, {args.drafts + 1}, {args.vocab}] fp32",
        "",
        f"date {datetime.datetime.now():%Y-%m-%d %H:%M}, commit {commit}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__}, {args.threads} threads, "
        f"load average before {os.getloadavg()[0]:.2f}",
        "",
        "| case | median ms | best ms |",
        "| --- | --- | --- |",
    ]
    for label, method, with_draft, temperature in CASES:
        arguments = _inputs(args.requests, args.drafts, args.vocab, with_draft, temperature)
        median, best = _time(arguments, method, args.repeats)
        lines.append(f"| {label} | {median:.2f} | {best:.2f} |")
    lines.append("")
    lines.append(f"load average after {os.getloadavg()[0]:.2f}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
