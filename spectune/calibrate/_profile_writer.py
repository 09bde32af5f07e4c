"""A calibration as an ``acceptance_profile`` document: the validated model, and its YAML text.

No format read here records each draft's confidence beside its accept/reject, so a profile leaves
``confidence_auc`` unset (a simulation then ranks drafts by its synthesized draft logits; docs/policies.md).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from spectune.calibrate._calibrate import Calibration
from spectune.calibrate._estimate import AcceptanceEstimate
from spectune.config import AcceptanceProfile
from spectune.errors import SpectuneError

__all__ = ["calibration_profile", "profile_yaml"]

_OPTION_FIELDS = ("name", "method", "temperature")
_DIGITS = 6  # rates and errors as written; far below any rounding or sampling error they carry

_FORMAT_NAMES = {
    "vllm-log": "vLLM log",
    "vllm-prometheus": "vLLM Prometheus scrapes",
    "vllm-per-request": "vLLM per-request metrics",
    "sglang-log": "SGLang log",
    "vllm-bench": "vllm bench serve results",
}


def _rounded(values: tuple[float, ...] | None) -> list[float] | None:
    return None if values is None else [round(v, _DIGITS) for v in values]


def _measured_fields(estimate: AcceptanceEstimate) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "conditional_rates": _rounded(estimate.conditional_rates),
        "conditional_rates_stderr": _rounded(estimate.conditional_stderr),
        "conditional_rates_rounding_error": _rounded(estimate.conditional_rounding_error),
        "unconditional_rates_measured": _rounded(estimate.unconditional_rates),
        "unconditional_rates_stderr": _rounded(estimate.unconditional_stderr),
        "unconditional_rates_rounding_error": _rounded(estimate.unconditional_rounding_error),
        "mean_acceptance_length_measured": round(estimate.mean_acceptance_length, _DIGITS),
        "mean_acceptance_length_stderr": None
        if estimate.mean_acceptance_length_stderr is None
        else round(estimate.mean_acceptance_length_stderr, _DIGITS),
        "num_windows": estimate.num_windows,
    }
    if estimate.num_drafts is not None:
        fields["counts"] = {
            "num_drafts": estimate.num_drafts,
            "num_draft_tokens": estimate.num_draft_tokens,
            "num_accepted_tokens": estimate.num_accepted_tokens,
            "accepted_per_position": None
            if estimate.accepted_per_position is None
            else list(estimate.accepted_per_position),
        }
    return fields


def _notes(calibration: Calibration) -> str:
    overall = calibration.overall
    lines = list(calibration.notes)
    rounding = overall.unconditional_rounding_error
    if overall.per_position_measured and rounding is not None and max(rounding) == 0.0:
        lines.append(
            "The log prints per-window rates to 3 decimals; with the exact token totals they pin every window's "
            "counts exactly, so no rounding error is left."
        )
    elif overall.per_position_measured and rounding is not None:
        lines.append(
            "The log prints per-window rates to 3 decimals; per-window counts were rebuilt from them and the exact "
            "token totals, then summed. The true pooled rates lie within the *_rounding_error fields "
            f"(at most {max(rounding):.5f} unconditional, "
            f"{max(overall.conditional_rounding_error or (0.0,)):.5f} conditional)."
        )
    elif not overall.per_position_measured:
        lines.append(
            "Only the mean acceptance length was measured; the per-position rates are assumed from vLLM's "
            "base-rate/decay model (decay >= 0.85) so as to reproduce it at this K."
        )
    if calibration.bins:
        lines.append(
            "Bins group windows by the running-request count logged with them (a snapshot at the end of each window)."
        )
    if overall.num_windows == 1:
        lines.append(
            "One window only: standard errors treat verification steps as independent and are likely too small."
        )
    return " ".join(lines)


def calibration_profile(
    calibration: Calibration, *, name: str, method: str | None = None, temperature: float | None = None
) -> AcceptanceProfile:
    """The ``kind: acceptance_profile`` document for ``calibration`` (validated; raises if it is not valid)."""
    overall = calibration.overall
    source = f"{_FORMAT_NAMES[calibration.log_format]}: {', '.join(calibration.files)}"
    if calibration.model_name:
        source += f" (model_name {calibration.model_name})"
    unit = "runs" if calibration.log_format == "vllm-bench" else "windows"
    source += f"; {overall.num_windows} {unit}, K={calibration.num_positions}"
    bins = [
        {"min_running": b.min_running, "max_running": b.max_running, **_measured_fields(b)} for b in calibration.bins
    ]
    document = {
        "kind": "acceptance_profile",
        "name": name,
        "method": method,
        "temperature": temperature,
        "source": source[:2000],
        **_measured_fields(overall),
        "bins": bins or None,
        "notes": _notes(calibration)[:4000] or None,
    }
    try:
        return AcceptanceProfile.model_validate(_without_none(document))
    except ValidationError as err:
        # Only the options the user chose can make it invalid; name them as options, not as profile fields.
        for error in err.errors():
            if error["loc"] and error["loc"][0] in _OPTION_FIELDS:
                raise SpectuneError(f"--{error['loc'][0]}: {error['msg'].lower()}, got {error['input']!r}") from None
        raise


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


_FIELD_ORDER = (
    "kind",
    "name",
    "method",
    "draft_sample_method",
    "temperature",
    "source",
    "min_running",
    "max_running",
    "conditional_rates",
    "unconditional_rates",
    "conditional_rates_stderr",
    "conditional_rates_rounding_error",
    "unconditional_rates_measured",
    "unconditional_rates_stderr",
    "unconditional_rates_rounding_error",
    "mean_acceptance_length_measured",
    "mean_acceptance_length_stderr",
    "num_windows",
    "counts",
    "bins",
    "notes",
)


def _ordered(data: dict[str, Any]) -> dict[str, Any]:
    keys = [key for key in _FIELD_ORDER if key in data] + [key for key in data if key not in _FIELD_ORDER]
    return {key: [_ordered(b) for b in data[key]] if key == "bins" else data[key] for key in keys}


def profile_yaml(profile: AcceptanceProfile, *, header: str | None = None) -> str:
    """YAML text of ``profile`` (fields in reading order, short lists inline), with an optional comment header."""
    data = _ordered(profile.model_dump(mode="json", exclude_none=True, exclude_defaults=True))
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    return text
