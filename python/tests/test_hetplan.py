"""The hetplan Python package against the runtime and the CLI.

Run by ctest (python-hetplan) with PYTHONPATH=<build>/python; by hand:
PYTHONPATH=build/python python3 -m pytest python/tests (or run this file).
The example model is examples/models/gpt2-tiny.onnx ($HETPLAN_EXAMPLES).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import hetplan

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.environ.get("HETPLAN_EXAMPLES", os.path.join(HERE, "..", "..", "examples", "models"))
GPT2 = os.path.join(EXAMPLES, "gpt2-tiny.onnx")
WORK = os.environ.get("HETPLAN_TEST_WORK") or tempfile.mkdtemp(prefix="hetplan-pytest-")
os.makedirs(WORK, exist_ok=True)


def ids(batch, seq, seed=3):
    return np.random.default_rng(seed).integers(0, 512, size=(batch, seq), dtype=np.int64)


def raises(fn, code=None, contains=None, kind=hetplan.HetplanError):
    try:
        fn()
    except kind as e:
        if code is not None:
            assert e.code == code, f"code {e.code!r}, wanted {code!r}: {e}"
        if contains is not None:
            assert contains in str(e), f"{contains!r} not in {str(e)!r}"
        return e
    raise AssertionError(f"no {kind.__name__} raised")


def test_import_and_versions():
    assert hetplan.__version__ == "0.1.0"
    assert hetplan.plan_schema_version == 1
    assert os.access(hetplan.executable(), os.X_OK)


def test_import_model():
    ir = hetplan.import_model(GPT2)
    assert ir.startswith("module") and "het.graph" in ir and '#het.dims<"batch", "sequence">' in ir
    raises(lambda: hetplan.import_model(os.path.join(WORK, "absent.onnx")), "CompileError", "absent.onnx")


def test_summary():
    s = hetplan.summary(GPT2)
    assert [i["name"] for i in s["inputs"]] == ["input_ids"]
    assert [o["name"] for o in s["outputs"]] == ["logits"]
    assert s["parameters"] > 0
    raises(lambda: hetplan.summary(os.path.join(WORK, "absent.onnx")), "CompileError", "absent.onnx")


def test_compile_returns_plan_object_and_json():
    out = os.path.join(WORK, "gpt2-3.plan")
    plan = hetplan.compile(GPT2, cluster="3xT4", mode="infer", batch=6, seq=16, pin="pp=3,mb=2", output=out)
    assert plan.path == out and os.path.exists(out)
    d = plan.to_dict()
    assert json.loads(plan.json) == d
    assert d["schema_version"] == hetplan.plan_schema_version
    assert d["settings"]["mode"] == "infer" and int(d["settings"]["global_batch"]) == 6
    assert plan.ranks == 3 and len(plan.stages) == 3
    assert plan.prediction["step_time_s"] > 0
    # compile --json's summary comes along, and agrees with the plan
    assert plan.summary["batch"] == 6 and len(plan.summary["stages"]) == 3
    text = plan.explain()
    assert "Stages (3" in text and text == hetplan.explain(out)
    assert "<svg" in plan.timeline_svg()[:300]
    report = os.path.join(WORK, "gpt2-3.html")
    assert plan.explain(html=report) == text
    with open(report) as f:
        page = f.read()
    assert page.startswith("<!DOCTYPE html>") and 'id="timeline"' in page and "T4" in page
    # A plan read back from the file is the same plan.
    assert hetplan.Plan.load(out).json == plan.json
    # Errors from the compiler are one line naming the problem.
    raises(lambda: hetplan.compile(GPT2, cluster="3xFOO", batch=6, seq=16), "CompileError", "FOO")


def test_compile_optimizer():
    # optimizer= reaches `hetplan compile --optimizer`: recorded in the plan,
    # and SGD's state is smaller than Adam's.
    plans = {o: hetplan.compile(GPT2, cluster="3xT4", mode="train", batch=6, seq=16, pin="pp=3,mb=2",
                                optimizer=o) for o in ("sgd", "adam")}
    for o, plan in plans.items():
        assert plan.to_dict()["settings"]["optimizer"] == o and plan.summary["optimizer"] == o
    state = {o: sum(int(r["memory"].get("optimizer_state", 0)) for r in p.to_dict()["ranks"])
             for o, p in plans.items()}
    assert 0 < state["sgd"] < state["adam"], state
    raises(lambda: hetplan.compile(GPT2, cluster="3xT4", mode="train", batch=6, seq=16, optimizer="lion"),
           "CompileError", "--optimizer must be")


def test_plan_session_matches_model_and_hetplan_run():
    plan = hetplan.compile(GPT2, cluster="3xT4", batch=6, seq=16, pin="pp=2,mb=2")  # temporary file
    x = ids(6, 16)
    s = hetplan.Session(plan)
    assert s.is_plan and s.ranks == 3 and s.process_rank == -1
    assert s.inputs == [("input_ids", "int64", (6, 16))]  # the shape it was compiled for
    raises(lambda: s.run({"input_ids": ids(6, 8)}), "InvalidArgument", "[6x16]")
    got = s.run({"input_ids": x})["logits"]
    assert got.shape == (6, 16, 512) and got.dtype == np.float32
    # the whole model on one rank
    ref = hetplan.Session(GPT2).run({"input_ids": x})["logits"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # `hetplan run` on the same plan and input
    saved = plan.save(os.path.join(WORK, "mb2.plan"))
    shutil.copyfile(GPT2, os.path.join(WORK, "gpt2-tiny.onnx"))
    npy = os.path.join(WORK, "ids.npy")
    np.save(npy, x)
    outdir = os.path.join(WORK, "run-out")
    subprocess.run([hetplan.executable(), "run", saved.path, "--model", GPT2, "--input", f"input_ids={npy}",
                    "--output", outdir, "--quiet"], check=True)
    np.testing.assert_array_equal(got, np.load(os.path.join(outdir, "logits.npy")))
    # A plan away from its model says how to point at it, the Python way.
    away = os.path.join(WORK, "away")
    os.makedirs(away, exist_ok=True)
    near = hetplan.compile(GPT2, cluster="3xT4", batch=6, seq=16, output=os.path.join(WORK, "near.plan"))
    if not os.path.isabs(near.to_dict()["model"]["path"]):  # compile wrote it relative to the plan
        raises(lambda: hetplan.Session(near.save(os.path.join(away, "p.plan")).path), "NotFound", "model_path=")
    # model_path points a saved plan at its model; views of non-contiguous arrays work
    s2 = hetplan.Session(saved.path, model_path=GPT2, ranks="threads", threads=1)
    xt = np.asfortranarray(x)
    # one thread instead of several: oneDNN splits GEMM sums by thread count
    # on some CPUs (AMD EPYC here), so the last bits may differ
    np.testing.assert_allclose(s2.run({"input_ids": xt})["logits"], got, rtol=1e-5, atol=1e-6)


def test_plan_session_concurrent_runs():
    """run() releases the GIL; concurrent runs of a plan are separate steps."""
    import threading
    plan = hetplan.compile(GPT2, cluster="3xT4", batch=6, seq=8, pin="pp=3,mb=1")
    s = hetplan.Session(plan, threads=1)
    inputs = [ids(6, 8, seed) for seed in range(4)]
    refs = [s.run({"input_ids": x})["logits"] for x in inputs]
    errors = []

    def worker(k):
        try:
            for r in range(3):
                i = (k + r) % len(inputs)
                np.testing.assert_array_equal(s.run({"input_ids": inputs[i]})["logits"], refs[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_session_errors():
    raises(lambda: hetplan.Session(os.path.join(WORK, "absent.plan")), "NotFound", "absent.plan")
    bad = os.path.join(WORK, "corrupt.plan")
    with open(bad, "wb") as f:
        f.write(b"HETPLAN\n" + b"\x00\x00\x00\x10" + b"garbage")
    raises(lambda: hetplan.Session(bad), "InvalidModel", "corrupt.plan")
    s = hetplan.Session(GPT2)
    raises(lambda: s.run({"input_ids": ids(1, 4).astype(np.int32)}), "InvalidArgument", "int64")
    raises(lambda: s.run({"nope": ids(1, 4)}), "InvalidArgument", "unknown input 'nope'")
    raises(lambda: s.run({"input_ids": ids(1, 4).astype(np.complex64)}), kind=TypeError)
    raises(lambda: hetplan.Session(GPT2, device="tpu"), kind=ValueError)
    raises(lambda: hetplan.Session(GPT2, threads=-1), kind=ValueError)
    raises(lambda: s.end_profiling(), "InvalidArgument", "profiling is off")


def test_profiling_writes_a_chrome_trace():
    prefix = os.path.join(WORK, "prof")
    s = hetplan.Session(GPT2, threads=1, profiling=True, profile_prefix=prefix)
    for _ in range(2):
        s.run({"input_ids": ids(2, 8)})
    path = s.end_profiling()
    assert path.startswith(prefix + "_") and path.endswith(".json")
    with open(path) as f:
        trace = json.load(f)
    assert trace["hetplan"]["runs"] == 2
    assert any(e["cat"] == "node" and e["args"]["op_type"] == "MatMul" for e in trace["traceEvents"])
    assert sum(1 for e in trace["traceEvents"] if e["name"] == "run") == 2


def test_generate_matches_onnxruntime_greedy_and_outputs_have_real_strides():
    # onnxruntime's GPT-2 export with a KV cache; greedy.json is onnxruntime's
    # own greedy loop (models/ort-genai/make_refs.py).
    ort_dir = os.path.join(HERE, "..", "..", "models", "ort-genai")
    s = hetplan.Session(os.path.join(ort_dir, "gpt2-past.onnx"))
    lines = [json.loads(l) for l in open(os.path.join(ort_dir, "prompts.jsonl"))][:6]
    ref = json.load(open(os.path.join(ort_dir, "greedy.json")))["tokens"]
    got = s.generate([l["prompt"] for l in lines], max_new_tokens=4, max_batch=4)
    for l, g in zip(lines, got):
        assert g[:len(ref[l["id"]])] == ref[l["id"]][:4], (l["id"], g)
    # Outputs own distinct elements (NumPy 2 with pybind11 2.10 once gave
    # every output zero strides: each element a copy of the first).
    out = s.run({"input_ids": np.array([[1, 2, 3]], np.int32), "position_ids": np.array([[0, 1, 2]], np.int32),
                 "attention_mask": np.ones((1, 3), np.int32),
                 **{f"past_{i}": np.zeros((2, 1, 4, 0, 8), np.float32) for i in range(5)}})
    logits = out["logits"]
    assert logits.strides == (3 * 1000 * 4, 1000 * 4, 4), logits.strides
    assert len(set(logits[0, -1].tolist())) > 100
    try:
        hetplan.Session(GPT2).generate([[1, 2]])
        raise AssertionError("a model without a KV cache must be refused")
    except hetplan.HetplanError as e:
        assert "no KV cache inputs" in str(e), e


if __name__ == "__main__":  # without pytest: every test_ function in order
    failed = 0
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except Exception as e:  # noqa: BLE001
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)


def test_executable_found_in_the_install_prefix():
    # An installed package finds the hetplan of its own prefix, whatever the
    # layout (Debian, pip/venv, ~/.local), before the build tree it came
    # from; without one, the build tree as before. Runs in a fresh
    # interpreter without $HETPLAN_EXECUTABLE and with a PATH that has none,
    # from a folder without a hetplan package (`python -c` imports from the
    # current folder first, and ctest runs this in build/python).
    src = os.path.join(HERE, "..", "hetplan")
    module = hetplan._hetplan.__file__
    root = tempfile.mkdtemp(prefix="hetplan-prefix-", dir=WORK)
    build_tool = os.path.join(root, "build", "bin", "hetplan")
    for layout in ("lib/python3/dist-packages", "lib/python3.11/site-packages",
                   "local/lib/python3.11/dist-packages"):
        for with_build_info in (False, True):
            prefix = os.path.join(root, f"{layout.replace('/', '_')}-{int(with_build_info)}")
            pkg = os.path.join(prefix, layout, "hetplan")
            os.makedirs(pkg)
            for name in ("__init__.py", "_errors.py"):
                shutil.copy(os.path.join(src, name), pkg)
            shutil.copy(module, pkg)
            if with_build_info:
                with open(os.path.join(pkg, "_build_info.py"), "w") as f:
                    f.write(f"HETPLAN_EXECUTABLE = {build_tool!r}\n")
            bindir = os.path.join(prefix, "local/bin" if layout.startswith("local") else "bin")
            env = {k: v for k, v in os.environ.items() if k != "HETPLAN_EXECUTABLE"}
            env.update(PYTHONPATH=os.path.join(prefix, layout), PATH="/nonexistent")
            ask = [sys.executable, "-c", "import hetplan; print(hetplan.executable())"]
            if with_build_info:
                # Without an installed hetplan: the build tree's.
                os.makedirs(os.path.dirname(build_tool), exist_ok=True)
                if not os.path.exists(build_tool):
                    shutil.copy(hetplan.executable(), build_tool)
                out = subprocess.run(ask, env=env, cwd=root, capture_output=True, text=True, check=True)
                assert out.stdout.strip() == os.path.normpath(build_tool), (layout, out.stdout)
            os.makedirs(bindir)
            tool = os.path.join(bindir, "hetplan")
            shutil.copy(hetplan.executable(), tool)
            out = subprocess.run(ask, env=env, cwd=root, capture_output=True, text=True, check=True)
            assert out.stdout.strip() == os.path.normpath(tool), (layout, with_build_info, out.stdout)
    # Nothing anywhere: the error says where it looked for it.
    env = {k: v for k, v in os.environ.items() if k != "HETPLAN_EXECUTABLE"}
    bare = os.path.join(root, "bare", "site", "hetplan")
    os.makedirs(bare)
    for name in ("__init__.py", "_errors.py"):
        shutil.copy(os.path.join(src, name), bare)
    shutil.copy(module, bare)
    env.update(PYTHONPATH=os.path.dirname(bare), PATH="/nonexistent")
    out = subprocess.run([sys.executable, "-c", "import hetplan; hetplan.executable()"], env=env, cwd=root,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "the hetplan executable was not found" in out.stderr, out.stderr
