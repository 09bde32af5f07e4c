"""Time ``spectune.kernels.rejection_sample`` on a CUDA GPU against one read of the logits.

For each method x R x K x V x dtype: the median time of one call (a CUDA graph replaying the call
over S distinct input sets, L2 flushed before each replay by ``triton.testing.do_bench``, divided
by S), the floor (the same graph with one ``torch.amax`` over the logits the method must read:
target, plus draft logits for the *_draft methods), and the achieved share of the measured copy
bandwidth, counting each logit byte once.

Inputs as the reference measured them (rejection_sampling.md section 7): temperature 0.8 for every
method but greedy; peaked target rows (one token holds 85-95% of the mass); draft logits near the
target, drafts = their argmax (one-hot methods, greedy drafting) or sampled from them (*_draft).

    python benchmarks/bench_kernels.py --out-dir OUT [--requests 1 64] [--methods greedy ...]
    python benchmarks/bench_kernels.py --no-files --variants default 'aligned=false' 'pass_a_warps=8' ...

A variant overrides fields of the launch plan (``spectune.kernels._plan.LaunchPlan``), or
``aligned=false`` plans as if no bulk copy could address the logits (the policy without TMA).

Writes OUT/kernels-full.csv (every column), OUT/kernels-latest.csv (method, R, K, V, dtype, us,
floor_us, date, commit) and OUT/kernels-table.md; prints the headline table last.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton.testing

from spectune.kernels import rejection_sample
from spectune.kernels._contract import validate_inputs
from spectune.kernels._launcher import launch, plan_for
from spectune.kernels._plan import LaunchPlan

METHODS = ("greedy", "standard_onehot", "standard_draft", "block_onehot", "block_draft", "synthetic")
TEMPERATURE = 0.8
SET_BYTES = 256 * 2**20  # enough distinct input sets per graph to amortise its launch
MAX_SETS = 16
# What a variant may override: the plan's fields (but the interpreter flag), and ``aligned``.
KNOBS = [field.name for field in dataclasses.fields(LaunchPlan) if field.name != "interpreting"] + ["aligned"]


PROFILE = False


def parse_variant(text: str) -> dict:
    """'pass_a_warps=8,bulk_copies=false' -> {'pass_a_warps': 8, 'bulk_copies': False}; 'default' -> {}."""
    options: dict = {}
    for item in filter(None, text.split(",")):
        if item == "default":
            continue
        name, _, value = item.partition("=")
        if name not in KNOBS:
            raise SystemExit(f"--variants: unknown plan field {name!r}; allowed: {', '.join(KNOBS)}")
        if value.lower() in ("true", "on", "false", "off"):
            options[name] = value.lower() in ("true", "on")
        elif value.lower() == "none":
            options[name] = None
        elif value.isdigit():
            options[name] = int(value)
        else:
            raise SystemExit(f"--variants: {name}={value!r}: expected an integer, true/false or none")
    return options


def call(arguments: dict, options: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    if not options:
        return rejection_sample(**arguments)
    names = (
        "target_logits",
        "draft_tokens",
        "draft_logits",
        "temperature",
        "seed",
        "method",
        "synthetic_conditional_rates",
    )
    inputs = validate_inputs(*(arguments.get(name) for name in names))
    return launch(inputs, plan_for(inputs, **options))


@dataclass
class InputSet:
    target: torch.Tensor  # [R, K+1, V]
    draft: torch.Tensor  # [R, K, V]
    greedy_drafts: torch.Tensor  # [R, K] argmax of the draft logits
    sampled_drafts: torch.Tensor  # [R, K] drawn from softmax(draft / T)
    seed: torch.Tensor


def make_set(
    num_requests: int, num_drafts: int, vocab: int, dtype: torch.dtype, generator: torch.Generator
) -> InputSet:
    """Peaked rows: the hot token of each row holds p ~ U(0.85, 0.95) of the mass at T = 0.8."""
    device = "cuda"
    base = torch.randn(num_requests, num_drafts + 1, vocab, device=device, generator=generator)
    hot = torch.randint(0, vocab, (num_requests, num_drafts + 1, 1), device=device, generator=generator)
    share = 0.85 + 0.1 * torch.rand(num_requests, num_drafts + 1, 1, device=device, generator=generator)
    others = torch.logsumexp(base / TEMPERATURE, dim=-1, keepdim=True)
    base.scatter_(2, hot, TEMPERATURE * (others + torch.log(share / (1 - share))))
    draft = base[:, :num_drafts] + 0.3 * torch.randn(
        num_requests, num_drafts, vocab, device=device, generator=generator
    )
    draft = draft.to(dtype)
    probs = torch.softmax(draft.float().view(-1, vocab) / TEMPERATURE, dim=-1)
    sampled = torch.multinomial(probs, 1, generator=generator).view(num_requests, num_drafts)
    del probs
    seed = torch.randint(0, 2**62, (num_requests,), device=device, generator=generator)
    return InputSet(base.to(dtype), draft, draft.float().argmax(dim=-1), sampled, seed)


def call_arguments(method: str, inputs: InputSet, num_drafts: int) -> dict:
    num_requests = inputs.target.shape[0]
    temperature = 0.0 if method == "greedy" else TEMPERATURE
    arguments = dict(
        target_logits=inputs.target,
        draft_tokens=inputs.sampled_drafts if method.endswith("_draft") else inputs.greedy_drafts,
        temperature=torch.full((num_requests,), temperature, device="cuda"),
        seed=inputs.seed,
        method=method.split("_")[0] if method != "greedy" else "standard",
    )
    if method.endswith("_draft"):
        arguments["draft_logits"] = inputs.draft
    if method == "synthetic":
        arguments["synthetic_conditional_rates"] = torch.full((num_drafts,), 0.8, device="cuda")
    return arguments


def graph_time_us(calls: list[Callable[[], object]]) -> float:
    """Median µs of one call: a CUDA graph of all calls, replayed with L2 flushed before each."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:  # compile and warm up outside the capture
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    torch.cuda.synchronize()
    median_ms = triton.testing.do_bench(graph.replay, warmup=5, rep=30, return_mode="median")
    return median_ms * 1000.0 / len(calls)


def kernel_times_us(run: Callable[[], object], calls: int = 10) -> dict[str, float]:
    """Mean device µs per call of each kernel a call launches (torch.profiler; L2 flushed between calls)."""
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(calls):
            flush.zero_()
            run()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in profile.key_averages():
        name = event.key
        if "kernel" in name and "elementwise" not in name.lower() and "fill" not in name.lower():
            total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
            times[name.split("(")[0]] = round(total / calls, 2)
    return times


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy of 4 GiB, bytes read plus written per second."""
    source = torch.empty(2**30, dtype=torch.float32, device="cuda").normal_()
    destination = torch.empty_like(source)
    ms = triton.testing.do_bench(lambda: destination.copy_(source), warmup=10, rep=100, return_mode="median")
    return 2 * 4 * 2**30 / (ms * 1e-3) / 1e9


def benchmark_point(num_requests, num_drafts, vocab, dtype, methods, bandwidth, variants=("default",)) -> list[dict]:
    generator = torch.Generator(device="cuda").manual_seed(num_requests * 1000 + num_drafts * 10 + vocab)
    elt = torch.finfo(dtype).bits // 8
    target_bytes = num_requests * (num_drafts + 1) * vocab * elt
    draft_bytes = num_requests * num_drafts * vocab * elt
    num_sets = max(1, min(MAX_SETS, math.ceil(SET_BYTES / (target_bytes + draft_bytes))))
    sets = [make_set(num_requests, num_drafts, vocab, dtype, generator) for _ in range(num_sets)]
    floor_target = graph_time_us([lambda s=s: torch.amax(s.target, dim=-1) for s in sets])
    floor_draft = graph_time_us([lambda s=s: (torch.amax(s.target, dim=-1), torch.amax(s.draft, dim=-1)) for s in sets])
    rows = []
    for method in methods:
        with_draft = method.endswith("_draft")
        arguments = [call_arguments(method, s, num_drafts) for s in sets]
        expected = call(arguments[0])
        for variant in variants:
            options = parse_variant(variant)
            us = graph_time_us([lambda a=a: call(a, options) for a in arguments])
            tokens, num_tokens = call(arguments[0], options)
            if not (torch.equal(tokens, expected[0]) and torch.equal(num_tokens, expected[1])):
                raise SystemExit(f"variant {variant!r} changed the tokens of {method} R={num_requests} K={num_drafts}")
            nbytes = target_bytes + (draft_bytes if with_draft else 0)
            floor = floor_draft if with_draft else floor_target
            if PROFILE:
                print(
                    f"  {method} R={num_requests} K={num_drafts} [{variant}] per kernel µs:",
                    kernel_times_us(lambda: call(arguments[0], options)),
                    flush=True,
                )
            rows.append(
                dict(
                    method=method,
                    R=num_requests,
                    K=num_drafts,
                    V=vocab,
                    dtype=str(dtype).removeprefix("torch."),
                    us=round(us, 2),
                    floor_us=round(floor, 2),
                    ratio=round(us / floor, 3),
                    bandwidth_pct=round(100 * nbytes / (us * 1e-6) / 1e9 / bandwidth, 1),
                    mean_tokens=round(float(num_tokens.float().mean()), 3),
                    sets=num_sets,
                    variant=variant,
                )
            )
    del sets
    torch.cuda.empty_cache()
    return rows


def git_commit() -> str:
    """SPECTUNE_COMMIT if set (a copied tree's .git may be stale), else git's HEAD."""
    if os.environ.get("SPECTUNE_COMMIT"):
        return os.environ["SPECTUNE_COMMIT"]
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=".")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--requests", nargs="+", type=int, default=[1, 16, 64, 256])
    parser.add_argument("--drafts", nargs="+", type=int, default=[1, 3, 7])
    parser.add_argument("--vocabs", nargs="+", type=int, default=[32000, 128256, 151936])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["default"],
        help="plan overrides per variant, e.g. default 'aligned=false' 'pass_a_warps=8,stages=2' "
        f"(fields: {', '.join(KNOBS)}); each must give the default's tokens",
    )
    parser.add_argument("--no-files", action="store_true", help="print only (variant comparisons)")
    parser.add_argument("--profile", action="store_true", help="also print each kernel's device time (torch.profiler)")
    args = parser.parse_args()
    global PROFILE
    PROFILE = args.profile
    for variant in args.variants:
        parse_variant(variant)  # fail before any timing
    torch.backends.cuda.matmul.allow_tf32 = False
    bandwidth = copy_bandwidth_gbs()
    rows = []
    for dtype_name in args.dtypes:
        for vocab in args.vocabs:
            for num_drafts in args.drafts:
                for num_requests in args.requests:
                    point = benchmark_point(
                        num_requests,
                        num_drafts,
                        vocab,
                        getattr(torch, dtype_name),
                        args.methods,
                        bandwidth,
                        args.variants,
                    )
                    rows.extend(point)
                    for variant in args.variants:
                        print(
                            " ".join(
                                f"{r['method']}={r['us']}/{r['floor_us']}" for r in point if r["variant"] == variant
                            ),
                            f"R={num_requests} K={num_drafts} V={vocab} {dtype_name} [{variant}]",
                            flush=True,
                        )
                    if not args.no_files:  # rewritten after every point: a cut-off run keeps its rows
                        write_outputs(rows, args.out_dir, bandwidth, quiet=True)
    if not args.no_files:
        write_outputs(rows, args.out_dir, bandwidth)


def write_outputs(rows: list[dict], out_dir: str, bandwidth: float, quiet: bool = False) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "kernels-full.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    # docs/performance.md is generated from this file and shows each row's date and commit
    stamp = {"date": f"{datetime.date.today():%Y-%m-%d}", "commit": git_commit()}
    with open(os.path.join(out_dir, "kernels-latest.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(
            handle,
            fieldnames=["method", "R", "K", "V", "dtype", "us", "floor_us", "date", "commit"],
            extrasaction="ignore",
        )
        writer.writeheader()
        writer.writerows({**row, **stamp} for row in rows)
    header = (
        f"# spectune kernels on {torch.cuda.get_device_name()}, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"commit {git_commit()}, torch {torch.__version__}, triton {triton.__version__}\n\n"
        f"copy bandwidth {bandwidth:.0f} GB/s (read + write); us = median per call; floor = amax over the "
        "same logits; bw = logit bytes once / us / copy bandwidth\n\n"
        "| method | R | K | V | dtype | us | floor us | ratio | bw % | mean tokens |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = [
        f"| {r['method']} | {r['R']} | {r['K']} | {r['V']} | {r['dtype']} | {r['us']} | {r['floor_us']} | "
        f"{r['ratio']} | {r['bandwidth_pct']} | {r['mean_tokens']} |"
        for r in rows
    ]
    with open(os.path.join(out_dir, "kernels-table.md"), "w") as handle:
        handle.write(header + "\n".join(lines) + "\n")
    if quiet:
        return
    headline = [r for r in rows if r["V"] == 128256 and r["R"] in (1, 64, 256) and r["K"] in (3, 7)]
    print(
        header
        + "\n".join(
            f"| {r['method']} | {r['R']} | {r['K']} | {r['V']} | {r['dtype']} | {r['us']} | {r['floor_us']} | "
            f"{r['ratio']} | {r['bandwidth_pct']} | {r['mean_tokens']} |"
            for r in headline
        )
    )


if __name__ == "__main__":
    main()
