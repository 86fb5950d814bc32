"""Sharded checkpoints as Hugging Face and PyTorch users keep them (file-format.md §12, ADR-090).

A tiny transformers model built from a config in code (no downloads) goes through
`save_pretrained(max_shard_size=...)` and `hurray.save(..., max_shard_size=...)`, is read back
by `hurray.load`, `hurray.open` and `hurray.convert` from its directory or its index, and gives
identical outputs; every refusal of a broken checkpoint names the index, the shard and the
tensor."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import hurray
from conftest import peer

np = peer("numpy")
torch = peer("torch")
transformers = peer("transformers")
safetensors_numpy = peer("safetensors.numpy")


def tiny_gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=200,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return config, transformers.GPT2LMHeadModel(config).eval()


def outputs(model):
    ids = torch.arange(16).reshape(2, 8) % 200
    with torch.no_grad():
        return model(ids).logits


def state_dict_of(tensors):
    return {name: torch.from_dlpack(t) for name, t in tensors.items()}


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    """save_pretrained's sharded safetensors checkpoint and the model's outputs."""
    config, model = tiny_gpt2()
    path = tmp_path_factory.mktemp("hf") / "gpt2"
    model.save_pretrained(path, max_shard_size="40KB")
    return path, config, outputs(model)


def test_save_pretrained_shards_load_into_an_identical_model(hf_checkpoint):
    path, config, expected = hf_checkpoint
    shards = sorted(p.name for p in path.glob("model-*.safetensors"))
    assert len(shards) > 2 and (path / "model.safetensors.index.json").exists()
    for source in (path, path / "model.safetensors.index.json", str(path)):
        tensors = hurray.load(source)
        model = transformers.GPT2LMHeadModel(config).eval()
        result = model.load_state_dict(state_dict_of(tensors), strict=False)
        assert result.unexpected_keys == [] and result.missing_keys == ["lm_head.weight"]  # tied
        assert torch.equal(outputs(model), expected)


def test_open_is_one_lazy_mapping_over_every_shard(hf_checkpoint):
    path, _, _ = hf_checkpoint
    index = json.loads((path / "model.safetensors.index.json").read_text())
    with hurray.open(path) as f:
        assert sorted(f) == sorted(index["weight_map"]) and len(f) == len(index["weight_map"])
        assert f.metadata == {"format": "pt"}  # the shards' own
        for name, shard in index["weight_map"].items():
            expected = safetensors_numpy.load_file(path / shard)[name]
            assert np.array_equal(np.asarray(f[name]), expected)
        assert "transformer.wte.weight" in f and "nothing" not in f
        with pytest.raises(KeyError):
            f["nothing"]


def test_a_directory_with_one_file_and_no_index_opens_that_file(tmp_path):
    config, model = tiny_gpt2()
    model.save_pretrained(tmp_path)  # fits one shard: model.safetensors alone
    assert not list(tmp_path.glob("*.index.json"))
    model2 = transformers.GPT2LMHeadModel(config).eval()
    model2.load_state_dict(state_dict_of(hurray.load(tmp_path)), strict=False)
    assert torch.equal(outputs(model2), outputs(model))


def test_hurray_save_writes_shards_and_an_index_in_hugging_faces_shape(tmp_path):
    config, model = tiny_gpt2()
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    max_bytes = 30_000
    hurray.save(tmp_path / "ckpt", sd, {"config": config.to_dict()}, max_shard_size=max_bytes)
    index = json.loads((tmp_path / "ckpt" / "model.hurray.index.json").read_text())
    assert set(index) == {"metadata", "weight_map"}
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in sd.values())
    assert sorted(index["weight_map"]) == sorted(sd)
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-{k:05d}-of-{len(shards):05d}.hurray" for k in range(1, len(shards) + 1)]
    assert sorted(os.listdir(tmp_path / "ckpt")) == shards + ["model.hurray.index.json"]
    for shard in shards:  # each at most max_bytes of data, unless one tensor is larger
        with hurray.open(tmp_path / "ckpt" / shard) as f:
            sizes = [f[name].nbytes for name in f]
            assert sum(sizes) <= max_bytes or len(sizes) == 1
            assert f.metadata["config"]["n_layer"] == 2  # every shard carries the metadata
    loaded = hurray.load(tmp_path / "ckpt", verify=True)
    assert list(loaded) == list(sd)  # shard after shard, each in save order: the dict's order
    model2 = transformers.GPT2LMHeadModel(config).eval()
    model2.load_state_dict(state_dict_of(loaded), strict=False)
    assert torch.equal(outputs(model2), outputs(model))
    with hurray.open(tmp_path / "ckpt") as f:
        assert f.metadata["config"] == json.loads(json.dumps(config.to_dict()))


def test_max_shard_size_takes_hugging_faces_units_and_refuses_the_rest(tmp_path):
    layers = {f"layer{i}": np.full(256, i, np.float32) for i in range(4)}  # 1 KiB each
    hurray.save(tmp_path / "a", layers, max_shard_size="2KiB")  # 2 per shard
    hurray.save(tmp_path / "b", layers, max_shard_size="2KB")  # 2000 bytes: 1 per shard
    assert len(list((tmp_path / "a").glob("*.hurray"))) == 2
    assert len(list((tmp_path / "b").glob("*.hurray"))) == 4
    for bad, kind in (("5XB", hurray.InvalidArgumentError), ("0GB", hurray.InvalidArgumentError),
                      (0, hurray.InvalidArgumentError), (-1, hurray.InvalidArgumentError),
                      (1.5, TypeError), (True, TypeError)):
        with pytest.raises(kind, match="max_shard_size"):
            hurray.save(tmp_path / "c", layers, max_shard_size=bad)
    assert not (tmp_path / "c").exists()


def test_a_new_save_replaces_the_old_shards_and_leaves_no_staging(tmp_path):
    layers = {f"layer{i}": np.full(256, i, np.float32) for i in range(4)}
    hurray.save(tmp_path, layers, max_shard_size="1KiB")
    (tmp_path / "notes.txt").write_text("mine")
    hurray.save(tmp_path / "model.hurray.index.json", {"x": np.ones(3)}, max_shard_size="1GB")
    assert sorted(os.listdir(tmp_path)) == ["model-00001-of-00001.hurray",
                                            "model.hurray.index.json", "notes.txt"]
    assert list(hurray.load(tmp_path)) == ["x"]


def test_a_failed_sharded_save_leaves_the_previous_checkpoint(tmp_path):
    layers = {f"layer{i}": np.full(256, i, np.float32) for i in range(4)}
    hurray.save(tmp_path, layers, max_shard_size="2KiB")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(TypeError, match="'bad'"):
        hurray.save(tmp_path, {"layer0": np.zeros(3), "bad": object()}, max_shard_size="1KiB")
    os.chmod(tmp_path, 0o500)  # shards cannot be staged: refused, nothing changed
    try:
        if os.geteuid() != 0:
            with pytest.raises(PermissionError):
                hurray.save(tmp_path, {"x": np.zeros(3)}, max_shard_size="1KiB")
    finally:
        os.chmod(tmp_path, 0o700)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_shard_that_cannot_be_written_leaves_the_previous_checkpoint(tmp_path):
    """The last shard fails mid-write (a file-size limit: EFBIG) after the first ones were
    written: they never reach the directory, the old index and shards stay, no staging is left."""
    from conftest import run_isolated
    hurray.save(tmp_path, {"old": np.arange(8.0)}, max_shard_size="1MB")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    out = run_isolated(f"""
import resource, signal, numpy as np, hurray
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
tensors = {{"a": np.zeros(20_000), "b": np.zeros(20_000), "big": np.zeros(40_000)}}
try:
    hurray.save({str(tmp_path)!r}, tensors, max_shard_size=170_000)
except OSError as e:
    print("refused:", type(e).__name__, e)
""")
    assert "refused:" in out and "File too large" in out, out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_convert_reads_a_sharded_checkpoint_as_one_input(hf_checkpoint, tmp_path):
    path, config, expected = hf_checkpoint
    hurray.convert(path, tmp_path / "one.safetensors")
    hurray.convert(path / "model.safetensors.index.json", tmp_path / "one.hurray")
    for out in ("one.safetensors", "one.hurray"):
        model = transformers.GPT2LMHeadModel(config).eval()
        model.load_state_dict(state_dict_of(hurray.load(tmp_path / out)), strict=False)
        assert torch.equal(outputs(model), expected)


def test_convert_writes_hurray_shards_from_safetensors_shards(hf_checkpoint, tmp_path):
    path, config, expected = hf_checkpoint
    hurray.convert(path, tmp_path / "py", max_shard_size="100KB")
    cli = subprocess.run(["hurray", "convert", "-q", "--max-shard-size", "100KB", str(path),
                          str(tmp_path / "cli" / "gpt2.hurray.index.json")],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    for out in (tmp_path / "py", tmp_path / "cli"):
        index = next(out.glob("*.hurray.index.json"))
        weight_map = json.loads(index.read_text())["weight_map"]
        assert sorted(weight_map) == sorted(hurray.open(path))
        assert len(set(weight_map.values())) > 1
        model = transformers.GPT2LMHeadModel(config).eval()
        model.load_state_dict(state_dict_of(hurray.load(out, verify=True)), strict=False)
        assert torch.equal(outputs(model), expected)
    assert all(p.name.startswith("gpt2-") for p in (tmp_path / "cli").glob("*.hurray"))
    bad = subprocess.run(["hurray", "convert", "--max-shard-size", "5 GB", str(path),
                          str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2 and "'5 GB' is not a positive size" in bad.stderr
    with pytest.raises(hurray.InvalidArgumentError, match="writes Hurray shards"):
        hurray.convert(path, tmp_path / "y.safetensors", max_shard_size="1MB")


def test_the_cli_reads_a_checkpoint_directory(hf_checkpoint, tmp_path):
    path, _, _ = hf_checkpoint
    shards = len(list(path.glob("model-*.safetensors")))
    info = subprocess.run(["hurray", "info", str(path)], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert f"sharded checkpoint, {shards} safetensors shards, " in info.stdout.splitlines()[0]
    verify = subprocess.run(["hurray", "verify", str(path)], capture_output=True, text=True)
    assert verify.returncode == 0 and f"its {shards} shards are safetensors files" in verify.stdout
    hurray.save(tmp_path / "ck", {"a": np.arange(4.0), "b": np.ones(5)}, max_shard_size=40)
    verify = subprocess.run(["hurray", "verify", str(tmp_path / "ck")], capture_output=True,
                            text=True)
    assert verify.returncode == 0 and "2 tensors" in verify.stdout, verify.stdout
    as_json = subprocess.run(["hurray", "info", "--json", str(tmp_path / "ck")],
                             capture_output=True, text=True)
    assert json.loads(as_json.stdout)["shard_count"] == 2


# ---- refusals -----------------------------------------------------------------------------


@pytest.fixture
def broken(hf_checkpoint, tmp_path):
    """A copy of the checkpoint to break, and its index as a dict."""
    path, _, _ = hf_checkpoint
    copy = tmp_path / "ckpt"
    shutil.copytree(path, copy)
    return copy, json.loads((copy / "model.safetensors.index.json").read_text())


def write_index(path, index):
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def test_a_missing_shard_is_file_not_found_naming_it_and_a_tensor(broken):
    path, index = broken
    name, shard = next(iter(index["weight_map"].items()))
    (path / shard).unlink()
    with pytest.raises(FileNotFoundError, match=f"shard '{shard}' \\(holding '"):
        hurray.load(path)


def test_a_tensor_the_index_does_not_list_is_refused(broken):
    path, index = broken
    name = next(iter(index["weight_map"]))
    del index["weight_map"][name]
    write_index(path, index)
    with pytest.raises(hurray.FormatError, match=f"holds tensor '{name}', which the weight_map "
                                                 "does not list"):
        hurray.open(path)


def test_a_tensor_the_index_places_in_another_shard_is_refused(broken):
    path, index = broken
    names = list(index["weight_map"])
    first, other = index["weight_map"][names[0]], next(
        s for s in index["weight_map"].values() if s != index["weight_map"][names[0]])
    index["weight_map"][names[0]] = other
    write_index(path, index)
    with pytest.raises(hurray.FormatError, match=f"places tensor '{names[0]}' in shard '{other}', "
                                                 "which does not hold it"):
        hurray.load(path)


def test_a_tensor_in_two_shards_is_refused(broken, tmp_path):
    path, index = broken
    name, shard = next(iter(index["weight_map"].items()))
    other = next(s for s in index["weight_map"].values() if s != shard)
    extra = dict(safetensors_numpy.load_file(path / other))
    extra[name] = np.zeros(2, np.float32)
    safetensors_numpy.save_file(extra, path / other, metadata={"format": "pt"})
    with pytest.raises(hurray.FormatError,
                       match=f"tensor '{name}' is in shards '{shard}' and '{other}'"):
        hurray.load(path)
    text = (path / "model.safetensors.index.json").read_text()  # twice in the JSON itself
    twice = text.replace('"weight_map": {', f'"weight_map": {{"{name}": "{other}", ', 1)
    (path / "model.safetensors.index.json").write_text(twice)
    with pytest.raises(hurray.FormatError, match=f"tensor '{name}' is listed twice in the "
                                                 "weight_map"):
        hurray.load(path)


@pytest.mark.parametrize("outside", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors",
                                     "..", ""])
def test_an_index_pointing_outside_its_directory_is_refused(broken, outside):
    path, index = broken
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = outside
    write_index(path, index)
    with pytest.raises(hurray.FormatError, match=f"tensor '{name}' is placed in shard "
                                                 ".*not a file name in the index's directory"):
        hurray.load(path)


@pytest.mark.parametrize("text, message", [
    ("", "expected '{'"),
    ("[]", "expected '{'"),
    ('{"metadata": {}}', "the index has no weight_map"),
    ('{"weight_map": {"a": 1}}', "expected a shard file name"),
    ('{"weight_map": {}, "weight_map": {}}', "a second weight_map"),
    ('{"weight_map": {}} x', "expected the end of the index"),
    ('{"metadata": ' + "[" * 100 + "]" * 100 + ', "weight_map": {}}', "nested deeper than 64"),
    ('{"metadata": {"total_size": 01}, "weight_map": {}}', "malformed number"),
])
def test_a_malformed_index_is_refused_naming_the_problem(tmp_path, text, message):
    (tmp_path / "model.safetensors.index.json").write_text(text)
    with pytest.raises(hurray.HurrayError, match=message):
        hurray.load(tmp_path)


def test_an_index_of_no_tensors_is_an_empty_checkpoint(tmp_path):
    (tmp_path / "m.hurray.index.json").write_text('{"metadata": {"total_size": 0}, '
                                                 '"weight_map": {}}')
    assert hurray.load(tmp_path) == {}
    with hurray.open(tmp_path) as f:
        assert len(f) == 0 and f.metadata == {}


def test_a_sharded_save_of_no_tensors_writes_an_empty_index_and_keeps_no_metadata_silently(
        tmp_path):
    hurray.save(tmp_path / "ckpt", {}, max_shard_size="1KB")
    assert os.listdir(tmp_path / "ckpt") == ["model.hurray.index.json"]  # as save_pretrained
    assert hurray.load(tmp_path / "ckpt") == {}
    with pytest.raises(hurray.InvalidArgumentError, match="no shard to keep the file metadata"):
        hurray.save(tmp_path / "meta", {}, {"config": {"n_layer": 0}}, max_shard_size="1KB")
    assert not (tmp_path / "meta" / "model.hurray.index.json").exists()


def test_a_directory_that_is_no_checkpoint_says_why(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no checkpoint index"):
        hurray.load(tmp_path)
    hurray.save(tmp_path / "a.hurray", {"x": np.ones(1)})
    hurray.save(tmp_path / "b.hurray", {"x": np.ones(1)})
    with pytest.raises(hurray.InputOutputError, match="but 2 checkpoint files \\('a.hurray' "
                                                      "first\\): open one of them"):
        hurray.open(tmp_path)
    (tmp_path / "a.index.json").write_text('{"weight_map": {}}')
    (tmp_path / "b.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(hurray.FormatError, match="2 checkpoint indexes"):
        hurray.load(tmp_path)


def test_a_corrupt_hurray_shard_fails_verification_naming_it(tmp_path):
    hurray.save(tmp_path, {"a": np.arange(64.0), "b": np.arange(64.0)}, max_shard_size=600)
    shard = tmp_path / "model-00002-of-00002.hurray"
    data = bytearray(shard.read_bytes())
    data[100] ^= 1  # inside b's values
    shard.write_bytes(bytes(data))
    with pytest.raises(hurray.ChecksumError, match="shard 'model-00002-of-00002.hurray': tensor 'b'"):
        hurray.load(tmp_path, verify=True)
    assert np.array_equal(np.asarray(hurray.load(tmp_path)["a"]), np.arange(64.0))


# ---- tied weights: the same storage written once (file-format.md §4, ADR-093) -------------------

def test_tied_weights_are_written_once_and_stay_tied(tmp_path):
    import spec_file
    config, model = tiny_gpt2()
    sd = model.state_dict()
    assert sd["lm_head.weight"].data_ptr() == sd["transformer.wte.weight"].data_ptr()
    tied = sd["lm_head.weight"].nbytes
    hurray.save(tmp_path / "tied.hurray", sd)
    untied = {k: v.clone() for k, v in sd.items()}
    hurray.save(tmp_path / "untied.hurray", untied)
    saved = (tmp_path / "untied.hurray").stat().st_size - (tmp_path / "tied.hurray").stat().st_size
    assert tied <= saved < tied + 4096  # one copy of the embedding fewer
    # an independent reader of the spec reads the file and finds the bytes shared
    spec = spec_file.read((tmp_path / "tied.hurray").read_bytes())
    assert spec.version == (2, 2)
    wte, head = spec.tensors["transformer.wte.weight"], spec.tensors["lm_head.weight"]
    assert head.buffers[0].shared and head.buffers[0].offset == wte.buffers[0].offset
    loaded = hurray.load(tmp_path / "tied.hurray", verify=True)
    as_torch = state_dict_of(loaded)
    assert as_torch["lm_head.weight"].data_ptr() == as_torch["transformer.wte.weight"].data_ptr()
    fresh = transformers.GPT2LMHeadModel(config).eval()
    fresh.load_state_dict(as_torch)
    assert fresh.lm_head.weight.data_ptr() == fresh.transformer.wte.weight.data_ptr()
    assert torch.equal(outputs(fresh), outputs(model))
    # the untied file stays 2.0, each tensor its own bytes
    assert spec_file.read((tmp_path / "untied.hurray").read_bytes()).version == (2, 0)


def test_a_copying_load_gives_each_name_its_own_memory_with_the_same_values(tmp_path):
    shared = np.arange(1024, dtype=np.float32)
    hurray.save(tmp_path / "m.hurray", {"a": shared, "b": shared})
    assert (tmp_path / "m.hurray").stat().st_size < 2 * shared.nbytes
    loaded = hurray.load(tmp_path / "m.hurray", mmap=False, verify=True)
    a, b = np.asarray(loaded["a"]), np.asarray(loaded["b"])
    assert np.array_equal(a, shared) and np.array_equal(b, shared)
    a[0] = -1  # fresh, writable memory per tensor, as mmap=False promises
    assert b[0] == 0


def test_views_of_one_storage_are_written_once_not_equal_bytes_elsewhere(tmp_path):
    import spec_file
    storage = torch.zeros(2048)  # all equal bytes: only the memory they come from tells them apart
    tensors = {"rows": storage.view(2, 1024), "cols": storage.view(1024, 2),
               "low": storage[:1024], "high": storage[1024:], "even": storage[::2],
               "elsewhere": torch.zeros(1024)}
    hurray.save(tmp_path / "views.hurray", tensors)
    spec = spec_file.read((tmp_path / "views.hurray").read_bytes())
    shared = {name: t.buffers[0].shared for name, t in spec.tensors.items()}
    assert shared == {"rows": False, "cols": True, "low": True, "high": True, "even": True,
                      "elsewhere": False}
    rows = spec.tensors["rows"].buffers[0]
    for name in ("cols", "low", "high", "even"):  # the storage's bytes, each at its own offset
        b = spec.tensors[name].buffers[0]
        assert (b.offset, b.size, b.checksum) == (rows.offset, rows.size, rows.checksum), name
    assert (tmp_path / "views.hurray").stat().st_size < 2048 * 4 + 1024 * 4 + 4096
    loaded = hurray.load(tmp_path / "views.hurray", verify=True)
    for name, t in tensors.items():
        assert torch.equal(torch.from_dlpack(loaded[name]), t), name
    base = torch.from_dlpack(loaded["rows"]).data_ptr()  # views of one mapping, as saved
    assert torch.from_dlpack(loaded["high"]).data_ptr() == base + 1024 * 4
    copied = hurray.load(tmp_path / "views.hurray", mmap=False, verify=True)
    for name, t in tensors.items():
        assert torch.equal(torch.from_dlpack(copied[name]), t), name


def test_a_view_is_written_once_after_its_tensor_and_anew_before_it(tmp_path):
    """Issue 22's `w`, `w[:10]`: 25,600 bytes once. The writer cannot take back bytes it has
    written, so a view saved before the tensor that holds it keeps bytes of its own."""
    w = torch.randn(64, 100)
    hurray.save(tmp_path / "after.hurray", {"w": w, "w10": w[:10]})
    hurray.save(tmp_path / "before.hurray", {"w10": w[:10], "w": w})
    assert (tmp_path / "after.hurray").stat().st_size < w.nbytes + 1024
    assert (tmp_path / "before.hurray").stat().st_size > w.nbytes + w[:10].nbytes
    for name in ("after", "before"):
        loaded = state_dict_of(hurray.load(tmp_path / f"{name}.hurray", verify=True))
        assert torch.equal(loaded["w"], w) and torch.equal(loaded["w10"], w[:10])
        assert list(loaded) == (["w", "w10"] if name == "after" else ["w10", "w"])
