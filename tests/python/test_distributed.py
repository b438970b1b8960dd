"""torch.distributed jobs on real process groups (gloo on 127.0.0.1, 2 and 4 processes): each
rank's FLOPs and the bytes of its collectives, exactly; one merged report (over the process
group, from files, and by `torchscan merge`); a failing rank that does not hang the others.

Each rank is its own process (`distributed_worker.py`), started with a timeout and killed if it
overruns, so that nothing is left behind whatever fails.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torchscan
from helpers import schema_validator

HERE = Path(__file__).resolve().parent
WORKER = HERE / "distributed_worker.py"
SCRIPT = Path(sys.executable).parent / "torchscan"
# The transformer of distributed_worker.py: two TransformerEncoderLayer(16, 2, 32), each with
# in_proj 48x16+48, out_proj 16x16+16, linear1 32x16+32, linear2 16x32+16, two LayerNorms 2x16+2x16.
LAYER_PARAMETERS = 48 * 16 + 48 + 16 * 16 + 16 + 32 * 16 + 32 + 16 * 32 + 16 + 4 * 16
PARAMETERS = 2 * LAYER_PARAMETERS
FLOAT = 4  # bytes of a float32


def test_the_model_has_the_parameters_the_tests_count():
    assert LAYER_PARAMETERS == 2224


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario, world, out, timeout=120):
    """Runs `world` ranks of `scenario`; returns their exit codes and logs. A rank past the
    timeout is killed, and so are the others."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), scenario, str(rank), str(world), str(port), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in range(world)
    ]
    deadline = time.monotonic() + timeout
    logs = []
    try:
        for proc in procs:
            out_text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            logs.append(out_text)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [proc.returncode for proc in procs], logs


def ranks(scenario, world, tmp_path):
    codes, logs = launch(scenario, world, tmp_path)
    assert codes == [0] * world, "\n".join(logs)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


def read(tmp_path, name):
    return json.loads((tmp_path / name).read_text())


def differences(a, b):
    """{operator: a - b} of two by_operator maps, where they differ."""
    return {k: a.get(k, 0) - b.get(k, 0) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)}


def check_merged(reports, merged, world, tmp_path, timed):
    """The merged report is the sum of the ranks', and names each rank's figures."""
    valid = schema_validator("merged_report")
    assert [(list(e.absolute_path), e.message) for e in valid.iter_errors(merged)] == []
    assert merged["context"]["world_size"] == world
    assert merged["context"]["backend"] == "gloo"
    assert merged["total"]["status"] == "complete"
    assert merged["total"]["value"] == sum(r["total"]["value"] for r in reports)
    comm = merged["communication"]
    for key in ("calls", "bytes_sent", "bytes_received"):
        assert comm[key] == sum(r["communication"][key] for r in reports)
    assert [f["rank"] for f in merged["ranks"]] == list(range(world))
    assert [f["flops"] for f in merged["ranks"]] == [r["total"] for r in reports]
    flops = [r["total"]["value"] for r in reports]
    assert merged["most_loaded_rank"] == flops.index(max(flops))
    assert merged["flops_imbalance"] == pytest.approx(max(flops) / (sum(flops) / world) - 1)
    for operator, value in merged["by_operator"].items():
        assert value == sum(r["by_operator"].get(operator, 0) for r in reports)
    # From the files each rank wrote, in any order: the same report as over the process group.
    files = [tmp_path / f"rank{r}.json" for r in reversed(range(world))]
    timed_files = [tmp_path / f"throughput{r}.json" for r in reversed(range(world))] if timed else None
    assert torchscan.merge_reports(files, timed_files) == merged


def check_cli(tmp_path, world, merged):
    """`torchscan merge rank*.json --throughput ...` writes the same MergedReport."""
    files = [str(tmp_path / f"rank{r}.json") for r in reversed(range(world))]  # any order
    timed = [str(tmp_path / f"throughput{r}.json") for r in reversed(range(world))]
    out = tmp_path / "cli.json"
    result = subprocess.run(
        [str(SCRIPT), "merge", *files, "--throughput", *timed, "--json", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == merged
    assert f"Job: {world} rank(s), backend gloo" in result.stdout
    assert f"Most loaded: rank {merged['most_loaded_rank']}" in result.stdout


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_training_step(tmp_path, world):
    reports = ranks("ddp", world, tmp_path)
    merged = read(tmp_path, "merged.json")
    for rank, report in enumerate(reports):
        assert report["context"]["distributed"] == {"rank": rank, "world_size": world, "backend": "gloo"}
        assert report["total"]["status"] == "complete", report["diagnostics"]
        assert report["diagnostics"] == []
        # FLOPs: the single-process count of the same model on this rank's batch, plus DDP's
        # averaging of the gradients (one multiply per gradient element, as they are copied into
        # the bucket) and SGD's update (one add per parameter element).
        single = read(tmp_path, f"single{rank}.json")
        assert differences(report["by_operator"], single["by_operator"]) == {
            "aten.add_": PARAMETERS,
            "aten.mul": PARAMETERS,
        }
        assert report["total"]["value"] == single["total"]["value"] + 2 * PARAMETERS
        # Bytes: one bucket holds every gradient (4,448 float32); its ring all-reduce moves
        # 2 (S - own chunk) each way, the own chunk being 1/world of it.
        comm = report["communication"]
        assert comm["status"] == "complete"
        bucket = PARAMETERS * FLOAT
        moved = 2 * (bucket - bucket // world)
        assert comm["by_operator"] == {"c10d.allreduce_": {"calls": 1, "bytes_sent": moved, "bytes_received": moved}}
        assert comm["by_phase"] == {
            "backward": {"status": "complete", "calls": 1, "bytes_sent": moved, "bytes_received": moved}
        }
    check_merged(reports, merged, world, tmp_path, timed=True)
    timed = [read(tmp_path, f"throughput{r}.json") for r in range(world)]
    seconds = [t["seconds"] for t in timed]
    assert merged["slowest_rank"] == seconds.index(max(seconds))
    assert merged["throughput"]["seconds"] == max(seconds)
    assert merged["throughput"]["peak_flops_per_second"] == world * 1e12
    job_flops = sum(t["flops"]["value"] for t in timed)
    assert merged["throughput"]["flops_per_second"]["value"] == pytest.approx(job_flops / max(seconds))
    assert merged["throughput"]["mfu"]["value"] == pytest.approx(job_flops / max(seconds) / (world * 1e12))
    check_cli(tmp_path, world, merged)


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_training_step(tmp_path, world):
    reports = ranks("fsdp", world, tmp_path)
    shard = LAYER_PARAMETERS // world * FLOAT  # one layer's shard, in bytes (no padding: dims divide)
    for rank, report in enumerate(reports):
        assert report["total"]["status"] == "complete", report["diagnostics"]
        assert report["diagnostics"] == []
        # FLOPs: the single-process count on this rank's batch (the layers run unsharded), plus
        # the division of the unsharded gradients before the reduce-scatter (gloo has no average)
        # and SGD's update of this rank's shard.
        single = read(tmp_path, f"single{rank}.json")
        assert differences(report["by_operator"], single["by_operator"]) == {
            "aten.add_": PARAMETERS // world,
            "aten.div_": PARAMETERS,
        }
        # FSDP2's copies into and out of its buffers do no arithmetic.
        for copy in ("fsdp.all_gather_copy_in", "fsdp.split_with_sizes_copy", "fsdp.chunk_cat"):
            assert report["ignored_operators"][copy]["reason"] == "data_movement"
        # Bytes: each all-gather sends this rank's shard to the world-1 others and receives
        # theirs; each reduce-scatter sends the partial sums of the world-1 other shards. Every
        # layer is gathered for its forward and again for its backward, and reduce-scattered once.
        comm = report["communication"]
        per_call = (world - 1) * shard
        assert comm["by_operator"] == {
            "c10d._allgather_base_": {"calls": 4, "bytes_sent": 4 * per_call, "bytes_received": 4 * per_call},
            "c10d._reduce_scatter_base_": {"calls": 2, "bytes_sent": 2 * per_call, "bytes_received": 2 * per_call},
        }
        assert comm["by_phase"]["forward"]["calls"] + comm["by_phase"]["backward"]["calls"] == 6
        # Attributed to the layers like their FLOPs: each layer's collectives are in its label.
        assert set(comm["by_module"]) >= {"FSDPSequential", "FSDPSequential.0", "FSDPSequential.1"}
    merged = read(tmp_path, "merged.json")
    check_merged(reports, merged, world, tmp_path, timed=True)
    check_cli(tmp_path, world, merged)


def collective_bytes(rank, world):
    """Hand-computed (sent, received) per operator of distributed_worker.collectives()."""
    chunk = 10 // world + (1 if rank < 10 % world else 0)  # torch.tensor_split's chunk `rank` of 10
    all_reduce = 2 * (10 - chunk) * FLOAT
    root = 1 % world
    broadcast = ((world - 1) * 3 * 8, 0) if rank == root else (0, 3 * 8)
    rows = [r + 1 for r in range(world)]
    expected = {
        "c10d.allreduce_": (all_reduce, all_reduce),
        "c10d.broadcast_": broadcast,
        "c10d._allgather_base_": ((world - 1) * 6 * FLOAT,) * 2,
        "c10d._reduce_scatter_base_": ((world - 1) * 6 * FLOAT,) * 2,
        # Rank r sends r+1 rows (2 float32 each) to each other rank, and receives each other
        # rank's rows.
        "c10d.alltoall_base_": (rows[rank] * (world - 1) * 8, (sum(rows) - rows[rank]) * 8),
        "c10d.barrier": (0, 0),
        # 8 bfloat16 over the ring: 2 (16 - own chunk) bytes each way.
        "_c10d_functional.all_reduce": ((2 * (8 - 8 // world) * 2),) * 2,
    }
    if rank == 0:
        expected["c10d.send"] = (7 * 4, 0)
    if rank == world - 1:
        expected["c10d.recv_"] = (0, 7 * 4)
    return expected


@pytest.mark.parametrize("world", [2, 4])
def test_a_hand_made_sequence_of_collectives(tmp_path, world):
    reports = ranks("collectives", world, tmp_path)
    for rank, report in enumerate(reports):
        assert report["total"]["status"] == "complete", report["diagnostics"]
        comm = report["communication"]
        assert comm["status"] == "complete"
        got = {op: (t["bytes_sent"], t["bytes_received"]) for op, t in comm["by_operator"].items()}
        assert got == collective_bytes(rank, world)
        assert all(t["calls"] == 1 for t in comm["by_operator"].values())
        assert comm["bytes_sent"] == sum(sent for sent, _ in got.values())
        assert comm["bytes_received"] == sum(received for _, received in got.values())
        assert report["ignored_operators"]["_c10d_functional.wait_tensor"]["reason"] == "synchronization"
    merged = read(tmp_path, "merged.json")
    check_merged(reports, merged, world, tmp_path, timed=False)
    assert merged["slowest_rank"] is None and "throughput" not in merged
    # Every byte sent is received somewhere: the job's sums agree under these conventions.
    assert merged["communication"]["bytes_sent"] == merged["communication"]["bytes_received"]


def test_a_rank_that_raises_does_not_hang_the_others(tmp_path):
    start = time.monotonic()
    codes, logs = launch("raises", 2, tmp_path, timeout=60)
    assert time.monotonic() - start < 60
    # Rank 1 raised; rank 0's all-reduce failed (its peer is gone) instead of waiting forever.
    assert codes[1] != 0 and "rank 1 fails on purpose" in logs[1]
    assert codes[0] != 0 and "RuntimeError" in logs[0]


def test_a_compiled_graph_with_a_functional_collective(tmp_path):
    # x @ w of 4x8 by 8x8: 2*4*8*8 FLOPs, priced when the graph compiled; the all-reduce of its
    # 4x8 float32 result (128 bytes) over 2 ranks moves 2 (128 - 64) bytes each way, once per run.
    for report in ranks("compiled", 2, tmp_path):
        assert report["total"] == {**report["total"], "status": "complete", "value": 2 * 4 * 8 * 8}
        comm = report["communication"]
        assert comm["status"] == "complete"
        assert comm["by_operator"] == {
            "_c10d_functional.all_reduce": {"calls": 1, "bytes_sent": 128, "bytes_received": 128}
        }


def test_a_tensor_parallel_mlp(tmp_path):
    # DTensor's row-wise linear sums its partial outputs: one all-reduce of the 4x8 float32
    # output (128 bytes), 2 (128 - 64) bytes each way on 2 ranks. Its operators run on the
    # local shards and are counted there: complete, with no diagnostic.
    for report in ranks("tensor_parallel", 2, tmp_path):
        assert report["total"]["status"] == "complete" and report["diagnostics"] == []
        assert report["communication"]["by_operator"] == {
            "_c10d_functional.all_reduce": {"calls": 1, "bytes_sent": 128, "bytes_received": 128}
        }
