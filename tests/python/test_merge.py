"""merge_reports and `torchscan merge` on reports at hand: the sums, the ranks, and clear errors
for inputs that are not one job's reports. (Real process groups: test_distributed.py.)"""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchscan
from helpers import schema_validator

SCRIPT = Path(sys.executable).parent / "torchscan"


def rank_report(rank, world, size):
    """A FlopReport as rank `rank` of a `world`-rank gloo job would write it."""
    x = torch.randn(size, size)
    report = torchscan.measure_flops(lambda: x @ x)
    report["context"]["distributed"] = {"rank": rank, "world_size": world, "backend": "gloo"}
    return report


@pytest.fixture(scope="module")
def job():
    return [rank_report(r, 3, 4 + 2 * r) for r in range(3)]


def merge_cli(*args, cwd):
    return subprocess.run([str(SCRIPT), "merge", *args], capture_output=True, text=True, cwd=cwd, check=False)


def test_merged_sums_and_ranks(job):
    merged = torchscan.merge_reports(list(reversed(job)))
    assert [(list(e.absolute_path), e.message) for e in schema_validator("merged_report").iter_errors(merged)] == []
    # x @ x of n x n: 2 n^3 FLOPs, for n = 4, 6, 8.
    assert merged["total"]["value"] == 2 * (4**3 + 6**3 + 8**3)
    assert merged["by_operator"] == {"aten.mm": merged["total"]["value"]}
    assert merged["operator_calls"] == {"aten.mm": 3}
    assert [r["rank"] for r in merged["ranks"]] == [0, 1, 2]
    assert merged["most_loaded_rank"] == 2
    mean = merged["total"]["value"] / 3
    assert merged["flops_imbalance"] == pytest.approx(2 * 8**3 / mean - 1)
    assert merged["communication"] is None and merged["slowest_rank"] is None


def test_a_partial_rank_makes_the_job_partial(job):
    partial = copy.deepcopy(job)
    partial[1]["total"] = {**partial[1]["total"], "status": "partial", "value": None}
    merged = torchscan.merge_reports(partial)
    assert merged["total"]["status"] == "partial"
    assert merged["total"]["known_value"] == 2 * (4**3 + 6**3 + 8**3)


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda j: j[:2], ValueError, r"the job has 3 ranks but rank\(s\) 2 have no report"),
        (lambda j: [j[0], j[0], j[1], j[2]], ValueError, "rank 0 has more than one report"),
        (
            lambda j: [*j[:2], {**j[2], "context": {**j[2]["context"], "distributed": None}}],
            ValueError,
            "reports 2 have no context.distributed",
        ),
        (lambda j: [], ValueError, "at least one report"),
        (lambda j: [{"layers": []}], TypeError, "AnalysisReport"),
        (lambda j: [3], TypeError, r"reports\[0\] must be a report"),
        (lambda j: "rank0.json", TypeError, "reports must be a list"),
    ],
)
def test_bad_inputs_are_clear_errors(job, edit, error, message):
    with pytest.raises(error, match=message):
        torchscan.merge_reports(edit(job))


def test_files_and_the_command_agree(job, tmp_path):
    files = []
    for report in job:
        path = tmp_path / f"rank{report['context']['distributed']['rank']}.json"
        path.write_text(json.dumps(report))
        files.append(path)
    merged = torchscan.merge_reports(files)
    assert merged == torchscan.merge_reports(job)
    result = merge_cli(*map(str, files), "--json", "job.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "job.json").read_text()) == merged
    assert "Job: 3 rank(s), backend gloo" in result.stdout
    assert "Most loaded: rank 2" in result.stdout
    only_json = merge_cli(*map(str, files), "--json", "-", cwd=tmp_path)
    assert json.loads(only_json.stdout) == merged


def test_the_command_fails_clearly(job, tmp_path):
    (tmp_path / "rank0.json").write_text(json.dumps(job[0]))
    (tmp_path / "notes.txt").write_text("not json")
    missing = merge_cli("rank0.json", "rank9.json", cwd=tmp_path)
    assert missing.returncode == 2 and "report file not found: rank9.json" in missing.stderr
    incomplete = merge_cli("rank0.json", cwd=tmp_path)
    assert incomplete.returncode == 1 and "rank(s) 1, 2 have no report" in incomplete.stderr
    garbage = merge_cli("rank0.json", "notes.txt", cwd=tmp_path)
    assert garbage.returncode == 1 and "notes.txt is not valid JSON" in garbage.stderr
    uneven = merge_cli("rank0.json", "--throughput", "rank0.json", "rank0.json", cwd=tmp_path)
    assert uneven.returncode == 2 and "one file per report" in uneven.stderr
    helped = merge_cli("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "RANK.json" in helped.stdout


def test_gather_reports_needs_a_process_group(job):
    # No process group in this process: a clear error, not a hang.
    with pytest.raises(RuntimeError, match=r"needs an initialized torch\.distributed process group"):
        torchscan.gather_reports(job[0])


def test_outside_a_job_reports_have_no_distributed_context():
    x = torch.randn(2, 2)
    report = torchscan.measure_flops(lambda: x @ x)
    assert "distributed" not in report["context"]
    assert "communication" not in report
    assert torchscan.distributed.process_context() is None


def test_the_command_merges_ranks_that_timed_nothing(job, tmp_path):
    # Each rank's Throughput ran no step: 0 seconds, so a slowest rank (the first) but no
    # imbalance of seconds; the text says so instead of failing on the missing number.
    idle = torchscan.Throughput().report()
    files, timed = [], []
    for report in job:
        rank = report["context"]["distributed"]["rank"]
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(report))
        (tmp_path / f"t{rank}.json").write_text(json.dumps(idle))
        files.append(f"rank{rank}.json")
        timed.append(f"t{rank}.json")
    result = merge_cli(*files, "--throughput", *timed, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "slowest: rank 0\n" in result.stdout
    merged = torchscan.merge_reports(job, [idle] * 3)
    assert (merged["slowest_rank"], merged["seconds_imbalance"]) == (0, None)
