"""When speculation pays off at no batch size, the exports serve plainly: no drafter behind 0 rows."""

from typer.testing import CliRunner

from spectune.cli import app

runner = CliRunner()


def test_speculation_off_everywhere_exports_and_prints_plain_serving(tmp_path, tiny_study):
    document = tmp_path / "off.yaml"
    # Almost nothing accepted: each draft costs a step and buys no token, so K = 0 wins at every batch size.
    document.write_text(tiny_study(name="nospec").replace("[0.73, 0.52, 0.35]", "[0.01, 0.0001, 0.000001]"))
    out = tmp_path / "out"
    result = runner.invoke(app, ["study", "run", str(document), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "serve without a speculative config" in result.output
    assert "--speculative-config '" not in result.output
    assert "vllm serve TARGET  # no --speculative-config" in result.output
    assert not (out / "vllm.json").exists()
    assert not (out / "vllm-synthetic.json").exists()
    sglang = (out / "sglang.txt").read_text().splitlines()
    assert [line for line in sglang if not line.startswith("#")] == []
    assert "--speculative-config</code>" not in (out / "report.html").read_text()
    assert "no --speculative-config" in (out / "report.html").read_text()
    # measure.sh serves plain decoding only: every server it starts is K = 0 without a drafter
    serves = {
        line.strip() for line in (out / "measure.sh").read_text().splitlines() if line.strip().startswith("serve ")
    }
    assert serves == {"serve k0 0 none"}
