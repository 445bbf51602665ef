"""hetplan from Python: import, summarize, compile and explain models, and
run models and compiled plans on NumPy arrays.

    import numpy as np, hetplan
    hetplan.summary("gpt2-tiny.onnx")["parameters"]
    plan = hetplan.compile("gpt2-tiny.onnx", cluster="2xA100-80G,4xT4",
                           mode="infer", batch=6, seq=16)
    plan.to_dict()["ranks"]; print(plan.explain())
    session = hetplan.Session(plan)            # every rank a thread here
    out = session.run({"input_ids": np.zeros((6, 16), np.int64)})["logits"]

The runtime parts (plan files, Session) are the C++ runtime in the
extension module ``hetplan._hetplan`` (no MLIR); ``summary`` and ``compile``
run the ``hetplan`` executable, found as ``$HETPLAN_EXECUTABLE``, in this
package's install prefix (``<prefix>/bin/hetplan``), in the build tree this
package was built in, or on ``PATH``. docs/python.md has the details.
"""
import json as _json
import os as _os
import shutil as _shutil
import subprocess as _subprocess
import tempfile as _tempfile

from ._errors import HetplanError
from . import _hetplan

__all__ = ["HetplanError", "Plan", "Session", "compile", "explain", "executable", "import_model", "summary",
           "plan_schema_version", "__version__"]

__version__ = "0.1.0"
plan_schema_version = _hetplan.plan_schema_version


def _executable_candidates(here):
    """Where a ``hetplan`` installed with this package, or built with it, is.

    First the prefix the package is installed in: <prefix>/bin beside
    <prefix>/lib/python3/dist-packages/hetplan (Debian, ``cmake --install``),
    <prefix>/lib/python3.X/site-packages/hetplan (pip, a venv, ``--user``'s
    ~/.local) or <prefix>/local/lib/...; in a build tree <build>/python/hetplan
    this is <build>/bin. Then the build tree the package was built in
    (``_build_info``, which a wheel carries too).
    """
    candidates = [_os.path.join(here, *([".."] * up), "bin", "hetplan") for up in range(2, 6)]
    try:
        from . import _build_info  # written by the CMake build: its bin/hetplan
        candidates.append(_build_info.HETPLAN_EXECUTABLE)
    except ImportError:
        pass
    return candidates


def executable():
    """The ``hetplan`` command this package runs for summary/compile."""
    env = _os.environ.get("HETPLAN_EXECUTABLE")
    if env:
        return env
    for c in _executable_candidates(_os.path.dirname(_os.path.abspath(__file__))):
        if c and _os.path.isfile(c) and _os.access(c, _os.X_OK):
            return _os.path.normpath(c)
    found = _shutil.which("hetplan")
    if found:
        return found
    raise HetplanError("the hetplan executable was not found: build it (scripts/build.sh), put it on "
                       "PATH, or set HETPLAN_EXECUTABLE", "NotFound")


def _tool(name):
    """hetplan-translate and friends: beside the hetplan executable, else on PATH."""
    beside = _os.path.join(_os.path.dirname(executable()), name)
    if _os.path.isfile(beside) and _os.access(beside, _os.X_OK):
        return beside
    found = _shutil.which(name)
    if found:
        return found
    raise HetplanError(f"{name} was not found beside {executable()} or on PATH", "NotFound")


def _run_cli(args, tool=None):
    cmd = [tool or executable()] + [str(a) for a in args]
    r = _subprocess.run(cmd, stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        msg = next((l.split("error: ", 1)[1] for l in lines if "error: " in l), None)
        raise HetplanError(msg or (lines[-1] if lines else f"{' '.join(cmd)} exited with {r.returncode}"),
                           "CompileError")
    return r.stdout


def import_model(model, shape_inference=True, allow_missing_weights=False):
    """The model imported into het IR (``hetplan-translate --import-onnx``),
    as MLIR text: what the passes and ``hetplan-opt`` work on."""
    args = ["--import-onnx", _os.fspath(model)]
    if not shape_inference:
        args.append("--no-shape-inference")
    if allow_missing_weights:
        args.append("--allow-missing-weights")
    return _run_cli(args, tool=_tool("hetplan-translate"))


def summary(model, shape_inference=True, allow_missing_weights=False):
    """What a model holds (``hetplan summary MODEL --json``) as a dict: node
    count, op types, parameters, symbolic dims, inputs and outputs."""
    args = ["summary", _os.fspath(model), "--json"]
    if not shape_inference:
        args.append("--no-shape-inference")
    if allow_missing_weights:
        args.append("--allow-missing-weights")
    return _json.loads(_run_cli(args))


class Plan:
    """A compiled plan file. ``path``: the file; ``json``: the plan as JSON
    text (plan.proto's field names); ``to_dict()``: the same as a dict;
    ``summary``: what ``hetplan compile --json`` printed (None for a plan
    read from a file); ``explain(html=None)``; ``timeline_svg()``; ``save(path)``."""

    def __init__(self, path, summary=None, _tmpdir=None):
        self.path = _os.fspath(path)
        self.summary = summary
        self._tmpdir = _tmpdir  # keeps a compile()'d plan's folder alive
        # protobuf prints map fields in no fixed order: sort for stable text.
        self._dict = _json.loads(_hetplan.plan_json(self.path))
        self.json = _json.dumps(self._dict, sort_keys=True)

    @classmethod
    def load(cls, path):
        return cls(path)

    def to_dict(self):
        return _json.loads(self.json)

    @property
    def ranks(self):
        return len(self._dict.get("ranks", []))

    @property
    def stages(self):
        return self._dict.get("stages", [])

    @property
    def prediction(self):
        return self._dict.get("prediction", {})

    def explain(self, html=None):
        return explain(self, html)

    def timeline_svg(self):
        return _hetplan.timeline_svg(self.path)

    def save(self, path):
        """Copies the plan file to ``path``. A plan may name its model by a
        path relative to the plan's folder (``to_dict()["model"]["path"]``):
        then keep them where they were, or give the model to
        Session(model_path=...)."""
        _shutil.copyfile(self.path, _os.fspath(path))
        return Plan(path, self.summary)

    def __repr__(self):
        p = self.prediction
        return (f"<hetplan.Plan {self.path}: {self.ranks} ranks, {len(self.stages)} stages, "
                f"predicted step {p.get('step_time_s', 0):.4g} s>")


def compile(model, cluster, mode="infer", batch=1, seq=None, dims=None, shapes=None, dtype=None,
            strategy=None, pin=None, output=None, extra_args=(), optimizer=None):
    """Plans ``model`` on ``cluster`` (``hetplan compile``) and returns the
    Plan. ``cluster``: an inline spec (``"2xA100-80G,4xT4"``) or a cluster
    file; ``dims``: {name: value} for other symbolic dims; ``shapes``:
    {input: "8x3x224x224"}; ``pin``: e.g. ``"pp=2,mb=2"``; ``optimizer``
    (``mode="train"``): ``"sgd"``, ``"momentum"``, ``"adam"`` (the default)
    or ``"adamw"``; ``output``: where
    to write the plan (default: a temporary folder the Plan keeps alive)."""
    tmpdir = None
    if output is None:
        tmpdir = _tempfile.TemporaryDirectory(prefix="hetplan-")
        output = _os.path.join(tmpdir.name, "model.plan")
    args = ["compile", _os.path.abspath(_os.fspath(model)), "--cluster", cluster, "--mode", mode,
            "--batch", batch, "--json", "--quiet", "-o", _os.fspath(output)]
    if seq is not None:
        args += ["--seq", seq]
    if dims:
        args += ["--dim", ",".join(f"{k}={v}" for k, v in dims.items())]
    for name, dims_ in (shapes or {}).items():
        args += ["--shape", f"{name}={dims_}"]
    if dtype:
        args += ["--dtype", dtype]
    if strategy:
        args += ["--strategy", strategy]
    if pin:
        args += ["--pin", pin]
    if optimizer:
        args += ["--optimizer", optimizer]
    out = _run_cli(list(args) + list(extra_args))
    try:
        summary_ = _json.loads(out)
    except ValueError:
        summary_ = None
    return Plan(output, summary_, tmpdir)


def explain(plan, html=None):
    """``hetplan explain``'s report of a Plan or a plan file. With ``html`` (a
    path), also writes the self-contained HTML report there
    (``hetplan explain PLAN --html PATH``, run by the ``hetplan`` command)."""
    path = plan.path if isinstance(plan, Plan) else _os.fspath(plan)
    if html is not None:
        _run_cli(["explain", path, "--html", _os.fspath(html)])
    return _hetplan.explain(path)


class Session:
    """Runs an ONNX model or a compiled inference plan on NumPy arrays.

    ``Session(path_or_plan, threads=0, device="cpu", ranks="auto",
    model_path=None, profiling=False, profile_prefix="hetplan_profile")``:
    ``threads``: kernel threads per run (per rank for plans; 0 = default);
    ``device``: "cpu" or "cuda" (model sessions, CUDA builds); ``ranks``:
    how a plan's ranks run: "threads" (all in this process), "mpi" (this
    process is one rank of an mpirun job; run() is collective) or "auto";
    ``model_path``: the plan's model elsewhere; ``profiling``: time the runs,
    ``end_profiling()`` writes a Chrome/Perfetto trace and returns its path.
    ``run(inputs, output_names=None)`` takes {name: array} and returns
    {name: array}; it releases the GIL, so threads may run concurrently."""

    def __init__(self, path, threads=0, device="cpu", ranks="auto", model_path=None, profiling=False,
                 profile_prefix="hetplan_profile"):
        if isinstance(path, Plan):
            self._plan = path  # keeps a temporary plan alive
            path = path.path
        try:
            self._s = _hetplan.Session(_os.fspath(path), threads, device, ranks, model_path or "", profiling,
                                       profile_prefix)
        except HetplanError as e:
            hint = "(SessionOptions::modelPath, hetplan_session_options_set_model_path)"
            if hint in e.message:  # say it the Python way
                raise HetplanError(e.message.replace(hint, "(hetplan.Session(..., model_path=...))"),
                                   e.code) from None
            raise

    def run(self, inputs, output_names=None):
        return self._s.run(dict(inputs), list(output_names or []))

    def generate(self, prompts, max_new_tokens=16, max_batch=8, eos_token_id=-1, pad_token_id=0):
        """Greedy decoding with the model's KV cache (past*/present* inputs
        and outputs), continuous batching of up to max_batch prompts: one
        list of new token ids per prompt (lists of ints)."""
        return self._s.generate([list(map(int, p)) for p in prompts], int(max_new_tokens), int(max_batch),
                                int(eos_token_id), int(pad_token_id))

    def end_profiling(self):
        return self._s.end_profiling()

    @property
    def inputs(self):
        """[(name, dtype, shape or None)], None for a dynamic dim."""
        return self._s.inputs

    @property
    def outputs(self):
        return self._s.outputs

    @property
    def source(self):
        return self._s.source

    @property
    def is_plan(self):
        return self._s.is_plan

    @property
    def ranks(self):
        return self._s.ranks

    @property
    def process_rank(self):
        return self._s.process_rank

    def __repr__(self):
        kind = f"plan on {self.ranks} ranks" if self.is_plan else "model"
        return f"<hetplan.Session {self.source} ({kind})>"
