//===- _hetplan.cpp - the hetplan Python extension (pybind11) -------------===//
//
// The runtime side of the `hetplan` package, without MLIR: plan files
// (read, as JSON, explained, timeline SVG) and Session runs on NumPy
// arrays. The compiler side (summary, compile) runs the `hetplan`
// executable (hetplan/__init__.py). Errors raise hetplan.HetplanError
// (RuntimeError) with the runtime's one-line message; bad arguments
// ValueError/TypeError.
//
//===----------------------------------------------------------------------===//
#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/PlanFile.h"
#include "hetplan/runtime/Session.h"
#include "hetplan/runtime/Generate.h"

#include <google/protobuf/util/json_util.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <sstream>

namespace py = pybind11;
using hetplan::Session;
using hetplan::Status;
using hetplan::runtime::DType;
using hetplan::runtime::Tensor;

namespace {

py::object errorType() { return py::module_::import("hetplan._errors").attr("HetplanError"); }

[[noreturn]] void raise(const Status &st) {
  PyErr_SetObject(errorType().ptr(),
                  py::make_tuple(st.message(), std::string(hetplan::statusCodeName(st.code()))).ptr());
  throw py::error_already_set();
}

hetplan::plan::Plan loadPlan(const std::string &path) {
  hetplan::plan::Plan p;
  std::string error;
  if (!hetplan::runtime::readPlan(path, p, error)) raise({hetplan::StatusCode::InvalidModel, error});
  return p;
}

/// NumPy dtype of a runtime element type (bfloat16 has none: refused).
py::dtype numpyType(DType t) {
  switch (t) {
  case DType::Float32: return py::dtype::of<float>();
  case DType::Float64: return py::dtype::of<double>();
  case DType::Float16: return py::dtype("float16");
  case DType::Int8: return py::dtype::of<int8_t>();
  case DType::Int16: return py::dtype::of<int16_t>();
  case DType::Int32: return py::dtype::of<int32_t>();
  case DType::Int64: return py::dtype::of<int64_t>();
  case DType::UInt8: return py::dtype::of<uint8_t>();
  case DType::UInt16: return py::dtype::of<uint16_t>();
  case DType::UInt32: return py::dtype::of<uint32_t>();
  case DType::UInt64: return py::dtype::of<uint64_t>();
  case DType::Bool: return py::dtype::of<bool>();
  default: throw py::type_error(std::string("element type ") + hetplan::runtime::dtypeName(t) +
                                " has no NumPy equivalent");
  }
}

DType runtimeType(const py::dtype &d, const std::string &name) {
  const std::pair<py::dtype, DType> known[] = {
      {py::dtype::of<float>(), DType::Float32},  {py::dtype::of<double>(), DType::Float64},
      {py::dtype("float16"), DType::Float16},    {py::dtype::of<int8_t>(), DType::Int8},
      {py::dtype::of<int16_t>(), DType::Int16},  {py::dtype::of<int32_t>(), DType::Int32},
      {py::dtype::of<int64_t>(), DType::Int64},  {py::dtype::of<uint8_t>(), DType::UInt8},
      {py::dtype::of<uint16_t>(), DType::UInt16}, {py::dtype::of<uint32_t>(), DType::UInt32},
      {py::dtype::of<uint64_t>(), DType::UInt64}, {py::dtype::of<bool>(), DType::Bool}};
  for (const auto &[np, rt] : known)
    if (d.is(np) || d.equal(np)) return rt;
  throw py::type_error("input '" + name + "': NumPy dtype " + d.attr("name").cast<std::string>() +
                       " is not a type hetplan runs");
}

py::list describe(const std::vector<hetplan::TensorInfo> &infos) {
  py::list out;
  for (const auto &i : infos) {
    py::object shape = py::none();
    if (i.hasShape) {
      py::list dims;
      for (int64_t d : i.shape) dims.append(d < 0 ? py::object(py::none()) : py::object(py::int_(d)));
      shape = py::tuple(dims);
    }
    std::string dtype = "undefined";
    try {
      dtype = numpyType(i.dtype).attr("name").cast<std::string>();
    } catch (const py::type_error &) {
      dtype = hetplan::runtime::dtypeName(i.dtype);
    }
    out.append(py::make_tuple(i.name, dtype, shape));
  }
  return out;
}

class PySession {
public:
  PySession(const std::string &path, int threads, const std::string &device, const std::string &ranks,
            const std::string &modelPath, bool profiling, const std::string &profilePrefix) {
    hetplan::SessionOptions o;
    if (threads < 0) throw py::value_error("threads must be >= 0 (0: the default)");
    o.threads = threads;
    if (device == "cpu") o.device = hetplan::Device::Cpu;
    else if (device == "cuda") o.device = hetplan::Device::Cuda;
    else throw py::value_error("device must be 'cpu' or 'cuda', not '" + device + "'");
    if (ranks == "auto") o.ranks = hetplan::PlanRanks::Auto;
    else if (ranks == "threads") o.ranks = hetplan::PlanRanks::InProcess;
    else if (ranks == "mpi") o.ranks = hetplan::PlanRanks::Mpi;
    else throw py::value_error("ranks must be 'auto', 'threads' or 'mpi', not '" + ranks + "'");
    o.modelPath = modelPath;
    o.profiling = profiling;
    o.profilePrefix = profilePrefix;
    Status st;
    {
      py::gil_scoped_release release;
      st = Session::create(path, &session_, o);
    }
    if (!st.ok()) raise(st);
  }

  py::dict run(const py::dict &feeds, const std::vector<std::string> &outputNames) {
    std::map<std::string, Tensor> inputs;
    std::vector<py::array> keep; // the arrays whose memory the views point at
    for (const auto &[key, value] : feeds) {
      std::string name = py::cast<std::string>(key);
      py::array a = py::array::ensure(value, py::array::c_style);
      if (!a) throw py::type_error("input '" + name + "' is not an array");
      DType t = runtimeType(a.dtype(), name);
      std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
      inputs.emplace(name, Tensor::view(t, std::move(shape), a.data(), nullptr));
      keep.push_back(std::move(a));
    }
    std::map<std::string, Tensor> outputs;
    Status st;
    {
      py::gil_scoped_release release;
      st = session_->run(inputs, &outputs, outputNames);
    }
    if (!st.ok()) raise(st);
    py::dict out;
    for (const auto &o : session_->outputs()) {
      auto it = outputs.find(o.name);
      if (it == outputs.end()) continue;
      const Tensor &t = it->second;
      // numpy.empty, not py::array(dtype, shape): pybind11 2.10 (Debian's)
      // reads the element size from NumPy 1's descriptor layout, which is
      // 0 under NumPy 2, so every stride came out 0 (each output a copy of
      // its first element). Sizes here come from the runtime's tensor.
      py::tuple shape(t.shape().size());
      for (size_t k = 0; k < t.shape().size(); ++k) shape[k] = py::int_(t.shape()[k]);
      py::array a = py::module_::import("numpy").attr("empty")(shape, numpyType(t.dtype()));
      if (t.nbytes()) std::memcpy(a.mutable_data(), t.raw(), t.nbytes());
      out[py::str(o.name)] = std::move(a);
    }
    return out;
  }

  /// Greedy generation with the model's KV cache (Generate.h): one list of
  /// new token ids per prompt.
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>> &prompts, int maxNewTokens,
                                             int maxBatch, int64_t eos, int64_t pad) {
    std::unique_ptr<hetplan::Generator> g;
    Status st = hetplan::Generator::create(*session_, &g);
    if (!st.ok()) raise(st);
    std::vector<hetplan::GenerateRequest> requests;
    for (const auto &p : prompts) requests.push_back({p, maxNewTokens});
    hetplan::GenerateOptions o;
    o.maxBatch = maxBatch;
    o.eosTokenId = eos;
    o.padTokenId = pad;
    std::vector<hetplan::GenerateResult> results;
    {
      py::gil_scoped_release release;
      st = g->generate(requests, o, &results);
    }
    if (!st.ok()) raise(st);
    std::vector<std::vector<int64_t>> out;
    for (auto &r : results) out.push_back(std::move(r.tokens));
    return out;
  }

  std::string endProfiling() {
    std::string path;
    Status st = session_->endProfiling(&path);
    if (!st.ok()) raise(st);
    return path;
  }

  const Session &session() const { return *session_; }

private:
  std::unique_ptr<Session> session_;
};

} // namespace

PYBIND11_MODULE(_hetplan, m) {
  m.doc() = "hetplan runtime: plan files and sessions on NumPy arrays (see the hetplan package)";
  m.attr("plan_schema_version") = hetplan::runtime::kPlanSchemaVersion;

  m.def("plan_json", [](const std::string &path) {
    hetplan::plan::Plan p = loadPlan(path);
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = false;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    auto st = google::protobuf::util::MessageToJsonString(p, &json, options);
    if (!st.ok()) throw std::runtime_error(path + ": cannot convert the plan to JSON: " + st.ToString());
    return json;
  }, py::arg("path"), "The plan file at `path` as JSON (field names as in plan.proto).");

  m.def("explain", [](const std::string &path) {
    hetplan::plan::Plan p = loadPlan(path);
    std::ostringstream os;
    hetplan::runtime::explainPlan(p, os);
    return os.str();
  }, py::arg("path"), "`hetplan explain PATH`'s report.");

  m.def("timeline_svg", [](const std::string &path) {
    return hetplan::runtime::timelineSvg(loadPlan(path));
  }, py::arg("path"), "The predicted timeline of one step as SVG text.");

  m.def("validate_plan", [](const std::string &path) {
    hetplan::plan::Plan p = loadPlan(path);
    std::string error;
    if (!hetplan::runtime::validatePlan(p, error)) raise({hetplan::StatusCode::InvalidModel, path + ": " + error});
  }, py::arg("path"));

  py::class_<PySession>(m, "Session")
      .def(py::init<const std::string &, int, const std::string &, const std::string &, const std::string &,
                    bool, const std::string &>(),
           py::arg("path"), py::arg("threads") = 0, py::arg("device") = "cpu", py::arg("ranks") = "auto",
           py::arg("model_path") = "", py::arg("profiling") = false,
           py::arg("profile_prefix") = "hetplan_profile")
      .def("run", &PySession::run, py::arg("inputs"), py::arg("output_names") = std::vector<std::string>{})
      .def("generate", &PySession::generate, py::arg("prompts"), py::arg("max_new_tokens") = 16,
           py::arg("max_batch") = 8, py::arg("eos_token_id") = -1, py::arg("pad_token_id") = 0)
      .def("end_profiling", &PySession::endProfiling)
      .def_property_readonly("inputs", [](const PySession &s) { return describe(s.session().inputs()); })
      .def_property_readonly("outputs", [](const PySession &s) { return describe(s.session().outputs()); })
      .def_property_readonly("source", [](const PySession &s) { return s.session().source(); })
      .def_property_readonly("is_plan", [](const PySession &s) { return s.session().isPlan(); })
      .def_property_readonly("ranks", [](const PySession &s) { return s.session().ranks(); })
      .def_property_readonly("process_rank", [](const PySession &s) { return s.session().processRank(); });
}
