#include "codegen/ir/builder.hpp"

#include <stdexcept>

namespace fp8c::ir {

Var::operator Expr() const {
  ExprNode n{Op::var, type};
  n.name = name;
  return Expr(std::make_shared<const ExprNode>(std::move(n)));
}

Builder::Builder(std::string name, int max_threads, int min_blocks) {
  kernel_.name = std::move(name);
  kernel_.max_threads = max_threads;
  kernel_.min_blocks = min_blocks;
  blocks_.push_back(&kernel_.body);
}

std::string Builder::unique(const std::string& name) {
  const int n = names_[name]++;
  return n == 0 ? name : name + "_" + std::to_string(n);
}

void Builder::append(Stmt s) {
  if (finished_) throw std::logic_error("ir::Builder: statement after finish()");
  blocks_.back()->push_back(std::move(s));
}

Expr Builder::param(const std::string& name, Type type, bool restrict_) {
  if (names_.count(name)) throw std::invalid_argument("ir::Builder: parameter " + name + " twice");
  names_[name] = 1;
  kernel_.params.push_back({name, type, restrict_ && type.is_pointer()});
  return Var{name, type};
}

Expr Builder::shared(const std::string& name, Type element, int count, int align) {
  if (element.is_pointer() || element.is_vector() || count <= 0)
    throw std::invalid_argument("ir::Builder: shared array " + name + " of " +
                                std::to_string(count) + " " + to_string(element));
  const std::string unique_name = unique(name);
  kernel_.shared.push_back({unique_name, element, count, align});
  return Var{unique_name, element.pointer_to(Space::shared)};
}

Var Builder::local(const std::string& name, Expr init) {
  Var v{unique(name), init.type()};
  Stmt s{StmtKind::declare};
  s.name = v.name;
  s.type = v.type;
  s.value = std::move(init);
  append(std::move(s));
  return v;
}

Var Builder::local(const std::string& name, Type type) {
  Var v{unique(name), type};
  Stmt s{StmtKind::declare};
  s.name = v.name;
  s.type = type;
  append(std::move(s));
  return v;
}

void Builder::assign(const Var& v, Expr value) {
  if (!(value.type() == v.type))
    throw std::invalid_argument("ir::Builder: " + v.name + " (" + to_string(v.type) +
                                ") assigned " + to_string(value.type()));
  Stmt s{StmtKind::assign};
  s.name = v.name;
  s.type = v.type;
  s.value = std::move(value);
  append(std::move(s));
}

void Builder::store(Expr pointer, Expr value, bool streaming) {
  const Type& p = pointer.type();
  if (!p.is_pointer() || p.read_only || !(p.pointee() == value.type()))
    throw std::invalid_argument("ir::Builder: store of " + to_string(value.type()) + " through " +
                                to_string(p));
  if (streaming && p.space != Space::global)
    throw std::invalid_argument("ir::Builder: a streaming store to shared memory");
  Stmt s{StmtKind::store};
  s.pointer = std::move(pointer);
  s.value = std::move(value);
  s.streaming = streaming;
  append(std::move(s));
}

void Builder::atomic_max(Expr pointer, Expr value) {
  const Type& p = pointer.type();
  if (!p.is_pointer() || p.read_only || !(p.pointee() == kU32) || !(value.type() == kU32))
    throw std::invalid_argument("ir::Builder: atomic_max of " + to_string(value.type()) +
                                " through " + to_string(p));
  Stmt s{StmtKind::atomic_max};
  s.pointer = std::move(pointer);
  s.value = std::move(value);
  append(std::move(s));
}

std::vector<Stmt> Builder::nested(const std::function<void()>& body) {
  std::vector<Stmt> out;
  if (!body) return out;
  blocks_.push_back(&out);
  try {
    body();
  } catch (...) {
    blocks_.pop_back();
    throw;
  }
  blocks_.pop_back();
  return out;
}

void Builder::if_(Expr cond, const std::function<void()>& then_body,
                  const std::function<void()>& else_body) {
  if (!cond.type().is_pred())
    throw std::invalid_argument("ir::Builder: if on " + to_string(cond.type()));
  Stmt s{StmtKind::if_};
  s.cond = std::move(cond);
  s.body = nested(then_body);
  s.else_body = nested(else_body);
  append(std::move(s));
}

void Builder::for_(const std::string& name, Expr begin, Expr end, Expr step,
                   const std::function<void(Expr)>& body, int unroll) {
  for (const Expr* e : {&begin, &end, &step})
    if (!(e->type() == kI32))
      throw std::invalid_argument("ir::Builder: loop " + name + " bound of " +
                                  to_string(e->type()));
  Stmt s{StmtKind::for_};
  s.name = unique(name);
  s.type = kI32;
  s.begin = std::move(begin);
  s.end = std::move(end);
  s.step = std::move(step);
  s.unroll = unroll;
  const Expr i = Var{s.name, kI32};
  s.body = nested([&] { body(i); });
  append(std::move(s));
}

void Builder::sync_threads() {
  append(Stmt{StmtKind::sync_threads});
}
void Builder::sync_warp() {
  append(Stmt{StmtKind::sync_warp});
}
void Builder::return_() {
  append(Stmt{StmtKind::return_});
}
void Builder::comment(const std::string& text) {
  Stmt s{StmtKind::comment};
  s.name = text;
  append(std::move(s));
}

Kernel Builder::finish() {
  if (blocks_.size() != 1) throw std::logic_error("ir::Builder: finish() inside a block");
  finished_ = true;
  return std::move(kernel_);
}

}  // namespace fp8c::ir
