"""Compile every kernel variant for sm_90 without a GPU (run as a script, without TRITON_INTERPRET).

Catches code that Triton's interpreter runs but its compiler rejects (break/continue, return in a
loop, interpreter-only builtins). Prints one line per variant; exits 1 on the first failure.
"""

import os
import sys

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
    "residual_sample_ptr": "*i32", "counter_ptr": "*i32", "tokens_ptr": "*i64", "num_tokens_ptr": "*i32",
}


def signature(fn, constexprs):
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = POINTER_DTYPES.get(name, "*fp32")
        elif name.startswith(("target_stride", "draft_stride")):
            sig[name] = "i64"
        else:
            sig[name] = "i32"
    return sig


def compile_variant(fn, **constexprs):
    source = ASTSource(fn=fn, signature=signature(fn, constexprs), constexprs=constexprs)
    return triton.compile(source, target=TARGET, options={"num_warps": 8})


def main() -> int:
    common = dict(TILE=8192, BLOCK_R=1, ROWS_PAD=8, TILES_PAD=16)
    variants = []
    for method in (0, 1, 2):
        for has_draft in (False, True):
            variants.append((_verify_kernel._verify_kernel, dict(METHOD=method, HAS_DRAFT=has_draft, **common)))
        variants.append((_residual_kernel._residual_kernel, dict(METHOD=method, **common)))
    for fn, constexprs in variants:
        try:
            kernel = compile_variant(fn, **constexprs)
        except Exception as error:  # report which variant broke, then fail
            print(f"FAIL {fn.__name__} {constexprs}: {type(error).__name__}: {error}")
            return 1
        print(f"ok {fn.__name__} {constexprs} shared={kernel.metadata.shared}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
