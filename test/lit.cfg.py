# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "HETPLAN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtext", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.hetplan_obj_root, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs", "make_inputs.py",
                   "unit", "conformance"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["hetplan-opt", "hetplan-translate", "hetplan"], [config.hetplan_tools_dir])

# Model generators use Debian's python3 (python3-onnx); the python3 on PATH
# may be a shim without Debian's packages.
python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
config.substitutions.append(("%python", python))
config.substitutions.append(("%models", os.path.join(config.hetplan_src_root, "examples", "models")))

# The project's shared models (ResNet50 & co., ONNX 1.22 node models) sit
# beside the checkout; tests that need them say `REQUIRES: shared-models`
# (ctest runs those as `lit-shared-models`, a skip without the folder, and
# fails `lit` on any other UNSUPPORTED test: test/lit_ctest.py).
shared_models = os.path.join(os.path.dirname(config.hetplan_src_root), "shared", "models")
if os.path.isdir(os.path.join(shared_models, "onnx-light")):
    config.available_features.add("shared-models")
config.substitutions.append(("%shared_models", shared_models))
