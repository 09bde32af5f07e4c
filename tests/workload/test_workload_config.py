"""Every rule of the workload config, fed a bad value: the message names file, line and field."""

import pytest

from spectune.config import WorkloadConfig

BASE = "concurrency: 16\nnum_requests: 100\nprompt_tokens: 512\noutput_tokens: 128\ntemperature: 0.0\n"
LOOP = "num_requests: 100\nprompt_tokens: 512\noutput_tokens: 128\ntemperature: 0.0\n"
LENGTHS = "concurrency: 4\nnum_requests: 10\ntemperature: 1.0\n"

# (document text, line, dotted field, fragment of the message)
BAD_DOCUMENTS = [
    (
        LOOP,
        1,
        "concurrency",
        "give exactly one of concurrency (closed loop), arrival_rate_per_s (open loop); got neither",
    ),
    ("concurrency: 4\narrival_rate_per_s: 2.0\n" + LOOP, 1, "concurrency", "got both"),
    ("concurrency: 0\n" + LOOP, 1, "concurrency", "must be >= 1, got 0"),
    ("concurrency: true\n" + LOOP, 1, "concurrency", "must be an integer, got true"),
    ("concurrency: 2.5\n" + LOOP, 1, "concurrency", "must be an integer, got 2.5"),
    ("arrival_rate_per_s: 0\n" + LOOP, 1, "arrival_rate_per_s", "must be > 0.0, got 0"),
    ("arrival_rate_per_s: -3.5\n" + LOOP, 1, "arrival_rate_per_s", "must be > 0.0, got -3.5"),
    ("arrival_rate_per_s: fast\n" + LOOP, 1, "arrival_rate_per_s", "must be a number, got 'fast'"),
    (BASE + "max_num_seqs: 0\n", 6, "max_num_seqs", "must be >= 1, got 0"),
    (
        "concurrency: 4\nprompt_tokens: 5\noutput_tokens: 5\ntemperature: 0.0\n",
        1,
        "num_requests",
        "required field is missing",
    ),
    (
        "concurrency: 4\nnum_requests: 0\nprompt_tokens: 5\noutput_tokens: 5\ntemperature: 0.0\n",
        2,
        "num_requests",
        "must be >= 1, got 0",
    ),
    (LENGTHS + "prompt_tokens: 0\noutput_tokens: 5\n", 4, "prompt_tokens", "must be >= 1, got 0"),
    (LENGTHS + "prompt_tokens: 1.5\noutput_tokens: 5\n", 4, "prompt_tokens", "must be an integer, got 1.5"),
    (LENGTHS + "prompt_tokens: 5\noutput_tokens: 2000000\n", 5, "output_tokens", "must be <= 1048576, got 2000000"),
    (LENGTHS + "prompt_tokens: 5\n", 1, "output_tokens", "required unless lengths_csv is given"),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens: {distribution: zipf, mean_tokens: 5, std_tokens: 1}\n",
        5,
        "output_tokens.distribution",
        "must be one of 'uniform', 'normal', 'lognormal', got 'zipf'",
    ),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens:\n  distribution: normal\n  std_tokens: 10\n",
        6,
        "output_tokens.mean_tokens",
        "required for distribution 'normal'",
    ),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens:\n  distribution: lognormal\n  mean_tokens: 100\n",
        6,
        "output_tokens.std_tokens",
        "required for distribution 'lognormal'",
    ),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens:\n  distribution: normal\n  mean_tokens: 100\n  std_tokens: -1\n",
        8,
        "output_tokens.std_tokens",
        "must be >= 0.0, got -1",
    ),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens:\n  distribution: normal\n  mean_tokens: 0\n  std_tokens: 1\n",
        7,
        "output_tokens.mean_tokens",
        "must be > 0.0, got 0",
    ),
    (
        LENGTHS + "prompt_tokens: {distribution: uniform, min_tokens: 10}\noutput_tokens: 5\n",
        4,
        "prompt_tokens.max_tokens",
        "required for distribution 'uniform'",
    ),
    (
        LENGTHS + "prompt_tokens:\n  distribution: uniform\n  min_tokens: 10\n  max_tokens: 20\n  mean_tokens: 15\n"
        "output_tokens: 5\n",
        8,
        "prompt_tokens.mean_tokens",
        "only for distribution normal or lognormal",
    ),
    (
        LENGTHS + "prompt_tokens:\n  distribution: uniform\n  min_tokens: 30\n  max_tokens: 20\noutput_tokens: 5\n",
        7,
        "prompt_tokens.max_tokens",
        "must be >= min_tokens (30), got 20",
    ),
    (
        LENGTHS + "prompt_tokens:\n  distribution: normal\n  mean_tokens: 500\n  std_tokens: 10\n  max_tokens: 100\n"
        "output_tokens: 5\n",
        6,
        "prompt_tokens.mean_tokens",
        "must be in [min_tokens, max_tokens] = [1, 100], got 500",
    ),
    (
        LENGTHS + "prompt_tokens: {distribution: uniform, min_tokens: 0, max_tokens: 3}\noutput_tokens: 5\n",
        4,
        "prompt_tokens.min_tokens",
        "must be >= 1, got 0",
    ),
    (LENGTHS + "prompt_tokens: [5]\noutput_tokens: 5\n", 4, "prompt_tokens", "must be an integer"),
    (
        LENGTHS + "prompt_tokens: 5\noutput_tokens: {distribution: uniform, max_tokens: 9, mean: 4}\n",
        5,
        "output_tokens.mean",
        "unknown field",
    ),
    (
        "concurrency: 4\nnum_requests: 10\nprompt_tokens: 5\noutput_tokens: 5\n",
        1,
        "temperature",
        "required field is missing",
    ),
    (BASE.replace("temperature: 0.0", "temperature: -0.5"), 5, "temperature", "must be >= 0.0, got -0.5"),
    (BASE.replace("temperature: 0.0", "temperature: 11"), 5, "temperature", "must be <= 10.0, got 11"),
    (BASE.replace("temperature: 0.0", "temperature: hot"), 5, "temperature", "must be a number, got 'hot'"),
    (BASE.replace("temperature: 0.0", "temperature: []"), 5, "temperature", "must have at least 1 items, got 0"),
    (
        BASE.replace("temperature: 0.0", "temperature:\n  - {temperature: 0.7, weight: 0}"),
        6,
        "temperature[0].weight",
        "must be > 0.0, got 0",
    ),
    (
        BASE.replace(
            "temperature: 0.0", "temperature:\n  - {temperature: 0.7, weight: 1}\n  - {temperature: 0.7, weight: 2}"
        ),
        7,
        "temperature[1].temperature",
        "each temperature once; 0.7 is already entry 0",
    ),
    (
        BASE.replace("temperature: 0.0", "temperature:\n  - {temperature: 12, weight: 1}"),
        6,
        "temperature[0].temperature",
        "must be <= 10.0, got 12",
    ),
    (
        BASE.replace("temperature: 0.0", "temperature:\n  - {temp: 0.5, weight: 1}"),
        6,
        "temperature[0].temp",
        "unknown field",
    ),
    (
        BASE.replace(
            "temperature: 0.0", "temperature: [" + ", ".join(f"{{temperature: {t}, weight: 1}}" for t in range(9)) + "]"
        ),
        5,
        "temperature",
        "must have at most 8 items, got 9",
    ),
    (BASE + "vocab_size: 64\n", 6, "vocab_size", "must be >= 128, got 64"),
    (BASE + "vocab_size: 1000000\n", 6, "vocab_size", "must be <= 262144, got 1000000"),
    (BASE + "vocab_sise: 1024\n", 6, "vocab_sise", "did you mean 'vocab_size'"),
]


@pytest.mark.parametrize(("text", "line", "field", "fragment"), BAD_DOCUMENTS)
def test_bad_workloads_are_located(load_workload, text, line, field, fragment):
    model, problems, _ = load_workload(text)
    assert model is None
    matching = [p for p in problems if p.field == field]
    assert matching, [str(p) for p in problems]
    assert fragment in matching[0].message, str(matching[0])
    assert matching[0].line == line, str(matching[0])


def test_valid_workload_reads_every_form(load_workload):
    model, problems, notices = load_workload(
        "arrival_rate_per_s: 12.5\nmax_num_seqs: 64\nnum_requests: 1000\n"
        "prompt_tokens: {distribution: uniform, min_tokens: 10, max_tokens: 20}\n"
        "output_tokens: {distribution: lognormal, mean_tokens: 200, std_tokens: 80.5, max_tokens: 4096}\n"
        "temperature:\n  - {temperature: 0.0, weight: 1}\n  - {temperature: 1.0, weight: 3}\nvocab_size: 256\n"
    )
    assert problems == [] and notices == []
    assert model is not None and model.arrival_rate_per_s == 12.5 and model.vocab_size == 256
    assert model.temperature_mix == ((0.0, 1.0), (0.25, 0.75))
    assert model.output_tokens.upper_tokens == 4096 and model.prompt_tokens.upper_tokens == 20


def test_one_temperature_is_a_mix_of_one_and_vocab_defaults_to_4096(load_workload):
    model, problems, _ = load_workload(BASE)
    assert problems == [] and model is not None
    assert model.temperature_mix == ((0.0,), (1.0,))
    assert model.vocab_size == 4096 and model.max_num_seqs == 256


def test_closed_loop_above_max_num_seqs_and_too_few_requests_are_noticed(load_workload):
    model, problems, notices = load_workload(
        "concurrency: 512\nnum_requests: 100\nprompt_tokens: 5\noutput_tokens: 5\ntemperature: 0.0\n"
    )
    assert model is not None and problems == []
    messages = dict(notices)
    assert "exceeds max_num_seqs (256)" in messages[("concurrency",)]
    assert "never reach concurrency 512" in messages[("num_requests",)]


def test_model_built_in_python_warns_instead_of_collecting_notices():
    from spectune.config._base import SpectuneNotice

    with pytest.warns(SpectuneNotice, match="exceeds max_num_seqs"):
        WorkloadConfig(concurrency=300, num_requests=1000, prompt_tokens=5, output_tokens=5, temperature=0.0)


CSV_DOC = "concurrency: 2\nnum_requests: 3\ntemperature: 0.0\nlengths_csv:\n  path: {path}\n"


@pytest.mark.parametrize(
    ("csv_text", "fragments"),
    [
        (
            "prompt_tokens,output_tokens\n10,20\n0,5\n7,x\n",
            [
                "trace.csv:3: prompt_tokens must be a whole number in [1, 1048576], got '0'",
                "trace.csv:4: output_tokens must be a whole number in [1, 1048576], got 'x'",
            ],
        ),
        ("10,20\n5\n", ["trace.csv:2: expected 2 columns (prompt_tokens,output_tokens), got 1"]),
        ("10,20\n\n5,2.5\n", ["trace.csv:3: output_tokens must be a whole number"]),
        (
            "prompt,output\n10,20\n",
            [
                "trace.csv:1: header must name columns prompt_tokens, output_tokens; missing "
                "prompt_tokens, output_tokens, got prompt, output"
            ],
        ),
        ("prompt_tokens,output_tokens\n", ["trace.csv: has a header but no rows"]),
        ("", ["trace.csv: holds no rows"]),
        (
            "id,output_tokens,prompt_tokens\n1,20,10\n2,30\n",
            ["trace.csv:3: expected 3 columns (as many as the header), got 2"],
        ),
    ],
)
def test_bad_csv_rows_are_reported_with_csv_file_and_line(load_workload, tmp_path, csv_text, fragments):
    (tmp_path / "trace.csv").write_text(csv_text)
    model, problems, _ = load_workload(CSV_DOC.format(path="trace.csv"))
    assert model is None
    assert all(p.field == "lengths_csv.path" and p.line == 5 for p in problems), [str(p) for p in problems]
    messages = "\n".join(p.message for p in problems)
    for fragment in fragments:
        assert fragment in messages


def test_many_bad_csv_rows_are_summarised(load_workload, tmp_path):
    (tmp_path / "trace.csv").write_text("".join(f"{i},0\n" for i in range(1, 40)))
    _, problems, _ = load_workload(CSV_DOC.format(path="trace.csv"))
    assert len(problems) == 11 and "... and 29 more bad rows" in problems[-1].message


def test_missing_csv_is_named_with_the_resolved_path(load_workload, tmp_path):
    _, problems, _ = load_workload(CSV_DOC.format(path="traces/absent.csv"))
    assert [p.field for p in problems] == ["lengths_csv.path"]
    assert f"no such file: {tmp_path / 'traces' / 'absent.csv'}" in problems[0].message


def test_csv_path_is_relative_to_the_document_and_header_columns_may_be_reordered(load_workload, tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("id,output_tokens,prompt_tokens\na,20,10\nb,7,3\n")
    (tmp_path / "docs").mkdir()
    model, problems, notices = load_workload(CSV_DOC.format(path="../traces/t.csv"), name="docs/w.yaml")
    assert problems == [] and model is not None
    assert model.lengths_csv.pairs == ((10, 20), (3, 7))
    assert notices == [(("lengths_csv", "path"), "the trace has 2 rows for 3 requests; rows are reused from the top")]


def test_csv_and_explicit_lengths_are_exclusive(load_workload, tmp_path):
    (tmp_path / "trace.csv").write_text("10,20\n")
    _, problems, _ = load_workload(CSV_DOC.format(path="trace.csv") + "prompt_tokens: 5\n")
    assert [(p.field, p.line) for p in problems] == [("prompt_tokens", 6)]
    assert "give either lengths_csv or prompt_tokens and output_tokens, not both" in problems[0].message


def test_csv_without_a_document_resolves_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "t.csv").write_text("4,5\n")
    monkeypatch.chdir(tmp_path)
    model = WorkloadConfig(concurrency=1, num_requests=1, lengths_csv={"path": "t.csv"}, temperature=0.5)
    assert model.lengths_csv.pairs == ((4, 5),)
