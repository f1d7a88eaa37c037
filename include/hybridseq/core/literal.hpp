#pragma once
/// \file
/// `core::literal`: a class-type template argument that nvcc can re-emit.
///
/// nvcc 13 compiles host code by printing it back as C++ for the host compiler. A
/// class-type constant passed on by name — a template parameter `S` forwarded as `X<S>`, a
/// variable template `v<S>`, a static member of a class template parameterised by one — it
/// prints as the undeclared template parameter object `__T<n>`, so the host compile fails
/// wherever such a type is named outside a template. A prvalue it prints as its value
/// (`X<Shape{8, 2}>`). Composite types therefore forward their shapes as `core::literal(S)`;
/// the type is the same (template arguments are compared by value). docs/design.md, "CUDA".

namespace hybridseq::core {

/// A copy of `v`, for use as a template argument (see the file comment).
template <class V>
constexpr V literal(const V& v) {
  return v;
}

}  // namespace hybridseq::core
