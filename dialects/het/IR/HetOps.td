//===- HetOps.td - het dialect operations ------------------*- tablegen -*-===//

#ifndef HET_OPS
#define HET_OPS

include "dialects/het/IR/HetDialect.td"
include "dialects/het/IR/HetTypes.td"
include "dialects/het/IR/HetAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// het.graph
//===----------------------------------------------------------------------===//

def Het_GraphOp : Het_Op<"graph", [
    FunctionOpInterface, IsolatedFromAbove, AutomaticAllocationScope]> {
  let summary = "one model: its inputs, nodes, weights and outputs";
  let description = [{
    The top-level ONNX graph. Arguments are the graph inputs, results the
    graph outputs; `het.name` argument/result attributes keep the ONNX value
    names. The body is one block in topological order, ending in `het.return`.

    ```mlir
    het.graph @mlp(%x: tensor<?x4xf32, #het.dims<"batch", "">> {het.name = "x"})
        -> (tensor<?x2xf32> {het.name = "y"}) {
      %w = het.weight @w : tensor<4x2xf32>
      %y = het.node "Gemm" opset 17 (%x, %w) : (...) -> tensor<?x2xf32>
      het.return %y : tensor<?x2xf32>
    }
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    TypeAttrOf<FunctionType>:$function_type,
    OptionalAttr<DictArrayAttr>:$arg_attrs,
    OptionalAttr<DictArrayAttr>:$res_attrs);
  let regions = (region SizedRegion<1>:$body);
  let builders = [OpBuilder<(ins "::llvm::StringRef":$name,
                                 "::mlir::FunctionType":$type)>];
  let extraClassDeclaration = [{
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() {
      return getFunctionType().getInputs();
    }
    ::llvm::ArrayRef<::mlir::Type> getResultTypes() {
      return getFunctionType().getResults();
    }
    ::mlir::Region *getCallableRegion() { return &getBody(); }
  }];
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
}

//===----------------------------------------------------------------------===//
// het.node
//===----------------------------------------------------------------------===//

def Het_NodeOp : Het_Op<"node", [RecursiveMemoryEffects]> {
  let summary = "one ONNX node, generic over its operator";
  let description = [{
    `op_type`, `domain` (empty for the default ONNX domain) and `opset` (the
    version of that domain the model imports) say which operator this is;
    `attrs` holds its ONNX attributes as MLIR attributes. Graph-valued
    attributes (If/Loop/Scan bodies) become regions, named by `region_names`;
    a region may use values of the enclosing graph, as ONNX subgraphs do.
    A missing optional input is a `het.none` value. `name` keeps the ONNX
    node name.

    ```mlir
    %y = het.node "ConvTranspose" opset 11 (%x, %w, %b)
           attrs {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>}
           {name = "up1"} : (tensor<1x4x8x8xf32>, tensor<4x3x3x3xf32>, tensor<3xf32>)
           -> tensor<1x3x8x8xf32>
    ```
  }];
  let arguments = (ins
    StrAttr:$op_type,
    DefaultValuedStrAttr<StrAttr, "">:$domain,
    I64Attr:$opset,
    Variadic<AnyType>:$inputs,
    OptionalAttr<DictionaryAttr>:$attrs,
    OptionalAttr<StrArrayAttr>:$region_names,
    OptionalAttr<StrAttr>:$name);
  let results = (outs Variadic<AnyType>:$outputs);
  let regions = (region VariadicRegion<SizedRegion<1>>:$bodies);
  let assemblyFormat = [{
    $op_type (`domain` $domain^)? `opset` $opset ` ` `(` $inputs `)`
    (`attrs` $attrs^)? attr-dict `:` functional-type($inputs, $outputs)
    ($bodies^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The ONNX attribute `name`, or null.
    ::mlir::Attribute getOnnxAttr(::llvm::StringRef name) {
      auto dict = getAttrsAttr();
      return dict ? dict.get(name) : ::mlir::Attribute();
    }
    /// The region for the graph attribute `name` (e.g. "then_branch"), or null.
    ::mlir::Region *getBodyNamed(::llvm::StringRef name);
  }];
}

//===----------------------------------------------------------------------===//
// het.weight
//===----------------------------------------------------------------------===//

def Het_WeightOp : Het_Op<"weight", [Pure]> {
  let summary = "a parameter (ONNX initializer), by name and type";
  let description = [{
    The bytes stay where the model keeps them: `extern` names the file,
    offset and length (`location`). Only tiny initializers (at most 256 bytes: shape
    vectors, scales, scalars) carry a `value` inline, because shape rules
    need to read them.

    ```mlir
    %w = het.weight @fc.weight at <file = "", offset = 96,
           length = 32, encoding = "raw"> : tensor<4x2xf32>
    %s = het.weight @shape value(dense<[1, -1]> : tensor<2xi64>) : tensor<2xi64>
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    OptionalAttr<ElementsAttr>:$value,
    OptionalAttr<Het_ExternAttr>:$location);
  let results = (outs AnyType:$result);
  let assemblyFormat = [{
    $sym_name (`value` `(` $value^ `)`)? (`at` $location^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// het.constant
//===----------------------------------------------------------------------===//

def Het_ConstantOp : Het_Op<"constant", [Pure]> {
  let summary = "an ONNX Constant node's value";
  let description = [{
    `value` is the tensor inline (dense elements) or, for a large one, a
    `#het.extern` reference into the model file.
  }];
  let arguments = (ins AnyAttrOf<[ElementsAttr, Het_ExternAttr]>:$value);
  let results = (outs AnyType:$result);
  let assemblyFormat = "`(` $value `)` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// het.none
//===----------------------------------------------------------------------===//

def Het_NoneOp : Het_Op<"none", [Pure]> {
  let summary = "an omitted optional input";
  let results = (outs NoneType:$result);
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// het.return
//===----------------------------------------------------------------------===//

def Het_ReturnOp : Het_Op<"return", [
    Pure, Terminator, ParentOneOf<["GraphOp", "NodeOp"]>]> {
  let summary = "the outputs of a graph or of a node's subgraph";
  let arguments = (ins Variadic<AnyType>:$operands);
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, {}); }]>];
  let assemblyFormat = "attr-dict ($operands^ `:` type($operands))?";
  let hasVerifier = 1;
}

#endif // HET_OPS
