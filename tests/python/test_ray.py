"""Ray (ADR-088): a tensor comes back from ray.get as a read-only view of the object store, as
NumPy arrays do, with every other descriptor field, for every layout; through put/get, task
arguments and returns on a cluster of two nodes (one CPU and a small object store each)."""

import hashlib
import os
from pathlib import Path

import pytest

import hurray
from conftest import peer, ray_servers_started
from test_pickle import CASES, descriptor

np = peer("numpy")
ray = peer("ray")


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node (resource "second"), 1 CPU and 80 MiB of store each; its
    workers import these tests' modules (the remote function's descriptor) as the driver does."""
    from ray.cluster_utils import Cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), saved]))
    with ray_servers_started() as runtime_env:
        nodes = Cluster(initialize_head=True,
                        head_node_args={"num_cpus": 1, "object_store_memory": 80 << 20})
        nodes.add_node(num_cpus=1, object_store_memory=80 << 20, resources={"second": 1})
    ray.init(address=nodes.address, log_to_driver=False, runtime_env=runtime_env)
    nodes.wait_for_nodes()
    yield nodes
    ray.shutdown()
    nodes.shutdown()
    if saved is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = saved


# A worker that dies at its start leaves ray.get waiting without end: fail instead.
TIMEOUT = 300


def digest(t):
    return hashlib.sha256(b"".join(p.tobytes() for p in t.parts)).hexdigest()


@ray.remote(resources={"second": 1})
def on_the_second_node(t):
    """Runs on the other node: its descriptor as it arrived, its bytes' digest, t itself."""
    return descriptor(t), digest(t), ray.get_runtime_context().get_node_id(), t


@pytest.mark.parametrize("make", CASES.values(), ids=CASES.keys())
def test_put_get_keeps_every_field_and_is_read_only(cluster, make):
    t = make()
    back = ray.get(ray.put(t), timeout=TIMEOUT)
    assert descriptor(back) == descriptor(t, readonly=True)


@ray.remote(resources={"second": 1})
def which_hurray():
    return hurray.__file__, os.environ.get("LD_PRELOAD")


def test_workers_run_the_build_under_test(cluster):
    """The workers import the same extension as the driver, under the driver's preload (the
    sanitizer stage's ASan runtime, which Ray's servers run without)."""
    assert ray.get(which_hurray.remote(), timeout=TIMEOUT) == (hurray.__file__,
                                                             os.environ.get("LD_PRELOAD"))


def test_task_arguments_and_returns_on_another_node(cluster):
    sent = {name: make() for name, make in CASES.items()}
    results = ray.get([on_the_second_node.remote(t) for t in sent.values()], timeout=TIMEOUT)
    here = ray.get_runtime_context().get_node_id()
    for (name, t), (arrived, bytes_digest, node, returned) in zip(sent.items(), results):
        assert node != here
        assert arrived == descriptor(t, readonly=True), name
        assert bytes_digest == digest(t), name
        assert descriptor(returned) == descriptor(t, readonly=True), name


def test_two_gets_of_one_object_read_the_same_memory_of_the_store(cluster):
    values = np.arange(4 << 20, dtype=np.float32)  # 16 MiB: in the store, not inline
    ref = ray.put(hurray.from_numpy(values))
    first, second = ray.get(ref, timeout=TIMEOUT), ray.get(ref, timeout=TIMEOUT)
    assert first.readonly and second.readonly
    assert np.asarray(first).ctypes.data == np.asarray(second).ctypes.data
    assert np.asarray(first).ctypes.data != values.ctypes.data
    np.testing.assert_array_equal(np.asarray(first), values)
    # What NumPy arrays do in the same place.
    array_ref = ray.put(values)
    assert not ray.get(array_ref, timeout=TIMEOUT).flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(first)[0] = 1


def test_a_writable_copy_is_one_call_away(cluster):
    import hurray.array_api as xp

    got = ray.get(ray.put(hurray.from_numpy(np.arange(6, dtype=np.int32))), timeout=TIMEOUT)
    mine = xp.asarray(got, copy=True)
    assert got.readonly and not mine.readonly
    np.asarray(mine)[0] = 7
    assert mine.tolist()[0] == 7 and got.tolist()[0] == 0
