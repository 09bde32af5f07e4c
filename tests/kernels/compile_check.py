"""Compile every kernel variant for sm_90 without a GPU (run as a script, without TRITON_INTERPRET).

Catches code that Triton's interpreter runs but its compiler rejects (break/continue, return in a
loop, interpreter-only builtins). Prints one line per variant; exits 1 on the first failure. Also
compiles pass A and the small-grid kernel as launched, and the small-grid kernel as
``benchmarks/trace_decision.py`` instruments it (so that tool's anchors keep matching the kernels).
With ``--resources`` each line ends with ptxas's registers, spills and stack, the dependent waves of
loads after the one-hot small-grid kernel's ticket (``load_waves_after_ticket``) and the number of tile-wide
index tensors Triton converted between layouts (``index_conversions``).
"""

import os
import re
import subprocess
import sys
import tempfile

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("compile_check.py must run without TRITON_INTERPRET=1")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from spectune.kernels import _decision, _residual_kernel, _small_grid, _verify_kernel  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
POINTER_DTYPES = {
    "target_ptr": "*fp32", "draft_logits_ptr": "*bf16", "draft_tokens_ptr": "*i64", "temperature_ptr": "*fp32",
    "seed_ptr": "*i64", "rates_ptr": "*fp32", "plan_ptr": "*i32", "draft_first_max_ptr": "*i32",
    "tile_token_ptr": "*i32", "excluded_token_ptr": "*i32", "residual_token_ptr": "*i32",
    "counter_ptr": "*i32", "tokens_ptr": "*i64", "num_tokens_ptr": "*i32",
}


def signature(fn, constexprs, logits=None):
    """Argument types; ``logits`` ("*fp32", "*bf16") sets both logit tensors' type if given."""
    dtypes = dict(POINTER_DTYPES, **({"target_ptr": logits, "draft_logits_ptr": logits} if logits else {}))
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):  # bulk-copy descriptors, or unused pointers without them
            dtype = dtypes["target_ptr" if name == "target_desc" else "draft_logits_ptr"]
            sig[name] = f"tensordesc<{dtype[1:]}[1, 1, {constexprs['TILE']}]>" if constexprs.get("USE_TMA") else dtype
        elif name.endswith("_ptr"):
            sig[name] = dtypes.get(name, "*fp32")
        elif name.startswith(("target_stride", "draft_stride")):
            sig[name] = "i64"
        else:
            sig[name] = "i32"
    return sig


def compile_variant(fn, options=None, logits=None, **constexprs):
    # Pointers, strides and the vocabulary as the launcher sees them for V = 128256: divisible by 16.
    aligned = {
        (i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
        if name not in constexprs and (name.endswith("_ptr") or "stride" in name or name == "vocab")
    }
    source = ASTSource(fn=fn, signature=signature(fn, constexprs, logits), constexprs=constexprs, attrs=aligned)
    return triton.compile(source, target=TARGET, options=options or {"num_warps": 8})


def resources(kernel, one_hot_small_grid: bool = False) -> str:
    """ptxas's register and spill report for the compiled PTX, and what the SASS says (no GPU needed);
    ``load_waves_after_ticket`` for the one-hot small-grid kernel, else "-"."""
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as directory:
        ptx, cubin = os.path.join(directory, "kernel.ptx"), os.path.join(directory, "kernel.cubin")
        with open(ptx, "w") as handle:
            handle.write(kernel.asm["ptx"])
        report = subprocess.run([os.path.join(tools, "ptxas"), "--gpu-name", "sm_90a", "-v", ptx, "-o", cubin],
                                capture_output=True, text=True).stderr
        sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", cubin], capture_output=True, text=True).stdout
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    waves = load_waves_after_ticket(sass) if one_hot_small_grid else "-"
    return (f"registers={registers.group(1) if registers else '?'} load_waves_after_ticket={waves} "
            f"spill_stores={spills.group(1) if spills else '?'} stack={stack.group(1) if stack else '?'} "
            f"index_conversions={index_conversions(kernel)}")


def load_waves_after_ticket(sass: str) -> str:
    """Dependent waves of global loads in the SASS of the one-hot small-grid kernel after its ticket
    (its one ``ATOMG.E.ADD``; with draft logits the barrier's atomics are there too).

    A wave ends where a cross-thread step (a shuffle, a warp reduction, a block barrier) comes after
    a load: a load after that step cannot be in flight with the ones before it. The one-hot decider
    needs one wave (v9's took four: draft tokens, statistics, the draft's logit, the draws).
    """
    instructions = [line.split(";")[0] for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    tickets = [i for i, text in enumerate(instructions) if "ATOMG.E.ADD" in text]
    if len(tickets) != 1:
        return "?"
    waves, step_since_load, loaded = 0, False, False
    for text in instructions[tickets[0] + 1:]:
        if re.search(r"\bLDG\.", text):
            if not loaded or step_since_load:
                waves += 1
            loaded, step_since_load = True, False
        elif loaded and re.search(r"\b(SHFL|REDUX|BAR\.SYNC)", text):
            step_since_load = True
    return str(waves)


def index_conversions(kernel) -> int:
    """Layout conversions of integer or boolean tensors of a tile's width (>= 1024) in the TTGIR.

    Token ids, the race's hash and masks are made from aranges and per-request scalars, so they can
    always be laid out like the logits they meet; a conversion means Triton computed them in some
    other layout (v8's decision hashed every token on 4-8 warps at once, then converted).
    """
    pattern = re.compile(r"ttg\.convert_layout .*-> tensor<\d+x(\d+)x(?:i1|i32|i64),")
    return sum(int(match.group(1)) >= 1024 for match in pattern.finditer(kernel.asm["ttgir"]))


def variants():
    padding = dict(ROWS_PAD=8, TILES_PAD=64)
    for has_draft in (False, True):
        for tma, per_program, stages in ((False, 1, 1), (True, 8, 3)):
            for split in (False, True) if has_draft else (False,):
                yield _verify_kernel._verify_kernel, None, dict(
                    HAS_DRAFT=has_draft, USE_TMA=tma, TILES_PER_PROGRAM=per_program, STAGES=stages,
                    SPLIT_DRAFT=split, TILE=4096, BLOCK_R=1,
                )
    for method in (0, 1, 2):
        for has_draft in (False, True):
            yield _decision._decide_kernel, None, dict(METHOD=method, HAS_DRAFT=has_draft, TILE=4096, BLOCK_R=1, **padding)
        yield _residual_kernel._residual_kernel, None, dict(SLOTS=7 if method == 1 else 1, TILE=4096, BLOCK_R=1, ROWS_PAD=8,
                                                             TILES_PER_PROGRAM=1)
        yield _residual_kernel._decide_residual_kernel, None, dict(METHOD=method, TILE=4096, BLOCK_R=1, **padding)
        # The small-grid kernel as launched (the register cap that keeps two programs an SM);
        # with draft logits the barrier kernel and the two launches around it.
        for has_draft, stage in ((False, 0), (True, 0), (True, 1), (True, 2)):
            options = {"num_warps": 8, "maxnreg": 128, "launch_cooperative_grid": has_draft and stage == 0}
            yield _small_grid._small_grid_kernel, options, dict(
                METHOD=method, HAS_DRAFT=has_draft, STAGE=stage, TILE=4096, BLOCK_R=1, **padding,
            )


def launched_pass_a():
    """Pass A as the launcher compiles it for large grids at V = 128256: (logits, options, constexprs).

    Bulk copies (fp32, R=256-sized grids) and plain loads under the launcher's register caps, which
    may spill a few bytes (the caps measured faster anyway; see ``_launcher.launch``).
    """
    from spectune.kernels import _launcher

    for has_draft in (False, True):
        draft = dict(HAS_DRAFT=has_draft, SPLIT_DRAFT=has_draft, TILE=4096, BLOCK_R=1)
        yield "*fp32", {"num_warps": 4}, dict(USE_TMA=True, TILES_PER_PROGRAM=16, STAGES=_launcher._STAGES, **draft)
        for logits, cap in (("*fp32", _launcher._FP32_REGISTERS), ("*bf16", _launcher._SIXTEEN_BIT_REGISTERS)):
            yield logits, {"num_warps": 4, "maxnreg": cap}, dict(USE_TMA=False, TILES_PER_PROGRAM=1, STAGES=1, **draft)


def traced_small_grid_kernel(directory: str):
    """The small-grid kernel from ``benchmarks/trace_decision.py``'s instrumented copy."""
    import importlib
    import pathlib

    import spectune.kernels

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    import trace_decision

    source = pathlib.Path(spectune.kernels.__file__).parent
    package = trace_decision.instrumented_package(source, pathlib.Path(directory) / "traced")
    traced = importlib.import_module(f"{package.__name__}._small_grid")
    common = dict(METHOD=0, STAGE=0, TILE=4096, BLOCK_R=1, ROWS_PAD=8, TILES_PAD=32)
    for has_draft in (False, True):
        yield traced._small_grid_kernel, dict(HAS_DRAFT=has_draft, **common)


def main() -> int:
    show_resources = "--resources" in sys.argv
    jobs = [(fn, options, None, constexprs, "ok") for fn, options, constexprs in variants()]
    jobs += [(_verify_kernel._verify_kernel, options, logits, constexprs, "launched")
             for logits, options, constexprs in launched_pass_a()]
    with tempfile.TemporaryDirectory() as trace_directory:
        jobs += [(fn, {"num_warps": 8, "maxnreg": 128}, None, constexprs, "traced")
                 for fn, constexprs in traced_small_grid_kernel(trace_directory)]
        for fn, options, logits, constexprs, tag in jobs:
            try:
                kernel = compile_variant(fn, options, logits, **constexprs)
            except Exception as error:  # report which variant broke, then fail
                print(f"FAIL {fn.__name__} {constexprs}: {type(error).__name__}: {error}")
                return 1
            one_hot = fn.__name__ == "_small_grid_kernel" and not constexprs["HAS_DRAFT"]
            extra = resources(kernel, one_hot) if show_resources else ""
            print(f"{tag} {fn.__name__} {logits or ''} {options or ''} {constexprs} {extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
