// RUN: hetplan-opt %s -split-input-file -verify-diagnostics --het-bind-shapes="dims=batch=16777216"

// Binding a dim may make a type's element count overflow int64: refused by
// the verifier after the pass, not carried into the planner's memory sums.
// expected-error @+1 {{input #0 of type 'tensor<16777216x1099511627776xf32>' has more elements or bytes than a 64-bit size holds}}
het.graph @bound_too_big(%x: tensor<?x1099511627776xf32, #het.dims<"batch", "">>) -> () {
  het.return
}
