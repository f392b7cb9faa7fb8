// Builds an ir::Kernel the way one writes a kernel: parameters, shared
// arrays, locals, then statements appended to the current block, with
// if/for taking the body as a callback.
//
//   ir::Builder b("transpose_u32", 256);
//   auto in = b.param("in", ir::kU32.pointer_to(ir::Space::global, true), true);
//   auto x = b.local("x", ir::special(ir::Special::tid_x) & 31);
//   b.if_(x < 4, [&] { b.store(ir::index(out, x), ir::load(ir::index(in, x))); });
//   ir::Kernel k = b.finish();
//
// Local names are made unique within the kernel (a second "x" is "x_1"), so
// C++ scoping in a builder never turns into shadowing in a backend.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/ir/ir.hpp"

namespace fp8c::ir {

// A mutable local: reads as an Expr, set with Builder::assign.
struct Var {
  std::string name;
  Type type;
  operator Expr() const;  // NOLINT(google-explicit-constructor): reads the local
};

class Builder {
 public:
  Builder(std::string name, int max_threads, int min_blocks = 0);

  Expr param(const std::string& name, Type type, bool restrict_ = true);
  // A __shared__ array; the Expr is a pointer to its first element.
  Expr shared(const std::string& name, Type element, int count, int align = 16);
  Var local(const std::string& name, Expr init);
  Var local(const std::string& name, Type type);  // not initialised
  // An immutable value with a name (a local assigned once), which keeps the
  // printed forms readable and stops an expression being built twice.
  Expr let(const std::string& name, Expr value) { return local(name, std::move(value)); }

  void assign(const Var& v, Expr value);
  void store(Expr pointer, Expr value, bool streaming = false);
  void atomic_max(Expr pointer, Expr value);
  void if_(Expr cond, const std::function<void()>& then_body,
           const std::function<void()>& else_body = {});
  // for (i = begin; i < end; i += step): i is an i32 local.
  void for_(const std::string& name, Expr begin, Expr end, Expr step,
            const std::function<void(Expr)>& body, int unroll = 0);
  void sync_threads();
  void sync_warp();
  void return_();
  void comment(const std::string& text);

  void set_summary(std::string text) { kernel_.summary = std::move(text); }
  Kernel finish();

 private:
  std::string unique(const std::string& name);
  void append(Stmt s);
  std::vector<Stmt> nested(const std::function<void()>& body);

  Kernel kernel_;
  std::vector<std::vector<Stmt>*> blocks_;
  std::map<std::string, int> names_;
  bool finished_ = false;
};

}  // namespace fp8c::ir
