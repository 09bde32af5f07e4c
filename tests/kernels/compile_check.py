"""Compile every kernel variant for sm_90 without a GPU (run as a script, without TRITON_INTERPRET).

Catches code that Triton's interpreter runs but its compiler rejects (break/continue, return in a
loop, interpreter-only builtins). Prints one line per variant; exits 1 on the first failure.
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

from spectune.kernels import _residual_kernel, _verify_kernel  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
POINTER_DTYPES = {
    "target_ptr": "*fp32", "draft_logits_ptr": "*bf16", "draft_tokens_ptr": "*i64", "temperature_ptr": "*fp32",
    "seed_ptr": "*i64", "rates_ptr": "*fp32", "tile_arg_ptr": "*i32", "plan_ptr": "*i32",
    "counter_ptr": "*i32", "tokens_ptr": "*i64", "num_tokens_ptr": "*i32",
}


def signature(fn, constexprs):
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):  # bulk-copy descriptors, or unused pointers without them
            dtype = POINTER_DTYPES["target_ptr" if name == "target_desc" else "draft_logits_ptr"]
            sig[name] = f"tensordesc<{dtype[1:]}[1, 1, {constexprs['TILE']}]>" if constexprs.get("USE_TMA") else dtype
        elif name.endswith("_ptr"):
            sig[name] = POINTER_DTYPES.get(name, "*fp32")
        elif name.startswith(("target_stride", "draft_stride")):
            sig[name] = "i64"
        else:
            sig[name] = "i32"
    return sig


def compile_variant(fn, **constexprs):
    # Pointers, strides and the vocabulary as the launcher sees them for V = 128256: divisible by 16.
    aligned = {
        (i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
        if name not in constexprs and (name.endswith("_ptr") or "stride" in name or name == "vocab")
    }
    source = ASTSource(fn=fn, signature=signature(fn, constexprs), constexprs=constexprs, attrs=aligned)
    return triton.compile(source, target=TARGET, options={"num_warps": 8})


def resources(kernel) -> str:
    """ptxas's register and spill report for the compiled PTX (no GPU needed)."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as handle:
        handle.write(kernel.asm["ptx"])
    report = subprocess.run([ptxas, "--gpu-name", "sm_90a", "-v", handle.name, "-o", os.devnull],
                            capture_output=True, text=True).stderr
    os.unlink(handle.name)
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    stack = re.search(r"(\d+) bytes stack frame", report)
    return (f"registers={registers.group(1) if registers else '?'} spill_stores={spills.group(1) if spills else '?'} "
            f"stack={stack.group(1) if stack else '?'}")


def variants():
    common = dict(TILE=4096, BLOCK_R=1, ROWS_PAD=8, TILES_PAD=64)
    for method in (0, 1, 2):
        for has_draft in (False, True):
            for fused in (False, True):
                for tma, per_program, stages in ((False, 1, 1), (True, 8, 3)):
                    for split in (False, True) if has_draft and not fused else (False,):
                        yield _verify_kernel._verify_kernel, dict(
                            METHOD=method, HAS_DRAFT=has_draft, FUSED=fused, USE_TMA=tma,
                            TILES_PER_PROGRAM=per_program, STAGES=stages, SPLIT_DRAFT=split, **common,
                        )
            yield _verify_kernel._decide_kernel, dict(METHOD=method, HAS_DRAFT=has_draft, **common)
        for fused in (False, True):
            yield _residual_kernel._residual_kernel, dict(METHOD=method, FUSED=fused, SLOTS=7 if method == 1 else 1, **common)
        yield _residual_kernel._decide_residual_kernel, dict(METHOD=method, **common)


def main() -> int:
    show_resources = "--resources" in sys.argv
    for fn, constexprs in variants():
        try:
            kernel = compile_variant(fn, **constexprs)
        except Exception as error:  # report which variant broke, then fail
            print(f"FAIL {fn.__name__} {constexprs}: {type(error).__name__}: {error}")
            return 1
        extra = resources(kernel) if show_resources else ""
        print(f"ok {fn.__name__} {constexprs} {extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
