// The IR as text: one statement a line, expressions in prefix form with
// their operands' types implied (each node's own type is known from its
// leaves). For `fp8c emit --ir` and for readable test failures.
#include <bit>
#include <cstdio>
#include <sstream>

#include "codegen/ir/ir.hpp"

namespace fp8c::ir {

const char* op_name(Op op) {
  switch (op) {
    case Op::add:
      return "add";
    case Op::sub:
      return "sub";
    case Op::mul:
      return "mul";
    case Op::div:
      return "div";
    case Op::rem:
      return "rem";
    case Op::min:
      return "min";
    case Op::max:
      return "max";
    case Op::bit_and:
      return "and";
    case Op::bit_or:
      return "or";
    case Op::bit_xor:
      return "xor";
    case Op::shl:
      return "shl";
    case Op::shr:
      return "shr";
    case Op::bit_not:
      return "not";
    case Op::neg:
      return "neg";
    case Op::lt:
      return "lt";
    case Op::le:
      return "le";
    case Op::gt:
      return "gt";
    case Op::ge:
      return "ge";
    case Op::eq:
      return "eq";
    case Op::ne:
      return "ne";
    case Op::select:
      return "select";
    case Op::index:
      return "index";
    case Op::load:
      return "load";
    case Op::make_vector:
      return "vector";
    case Op::fma:
      return "fma";
    case Op::shfl_xor:
      return "shfl_xor";
    case Op::pack_e4m3x2:
      return "pack_e4m3x2";
    case Op::pack_e5m2x2:
      return "pack_e5m2x2";
    case Op::f16_to_f32:
      return "f16_to_f32";
    case Op::f32_to_f16:
      return "f32_to_f16";
    case Op::f32_to_bf16:
      return "f32_to_bf16";
    case Op::pack_bf16x2:
      return "pack_bf16x2";
    case Op::pack_f16x2:
      return "pack_f16x2";
    case Op::unpack_e4m3x2:
      return "unpack_e4m3x2";
    case Op::unpack_e5m2x2:
      return "unpack_e5m2x2";
    case Op::byte_perm:
      return "byte_perm";
    case Op::clz:
      return "clz";
    case Op::tanh_approx:
      return "tanh_approx";
    case Op::ex2_approx:
      return "ex2_approx";
    case Op::div_approx:
      return "div_approx";
    case Op::address:
      return "address";
    default:
      return "?";
  }
}

namespace {

const char* special_name(Special s) {
  switch (s) {
    case Special::tid_x:
      return "tid.x";
    case Special::ctaid_x:
      return "ctaid.x";
    case Special::ctaid_y:
      return "ctaid.y";
    case Special::ctaid_z:
      return "ctaid.z";
    case Special::ntid_x:
      return "ntid.x";
    case Special::nctaid_x:
      return "nctaid.x";
    case Special::nctaid_y:
      return "nctaid.y";
  }
  return "?";
}

std::string text(const Expr& e) {
  const ExprNode& n = *e;
  switch (n.op) {
    case Op::constant:
      if (n.type.is_float()) {
        char b[48];
        std::snprintf(b, sizeof b, "%a", static_cast<double>(n.float_value));
        return b;
      }
      return std::to_string(n.int_value) + ":" + to_string(n.type);
    case Op::var:
      return n.name;
    case Op::special:
      return special_name(n.special);
    case Op::convert:
      return "convert<" + to_string(n.type) + ">(" + text(n.args[0]) + ")";
    case Op::bitcast:
      return "bitcast<" + to_string(n.type) + ">(" + text(n.args[0]) + ")";
    case Op::reinterpret:
      return "reinterpret<" + to_string(n.type) + ">(" + text(n.args[0]) + ")";
    case Op::lane:
      return text(n.args[0]) + "." + std::to_string(n.lane);
    default: {
      std::string s = std::string(op_name(n.op)) + "(";
      for (std::size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + text(n.args[i]);
      return s + ")";
    }
  }
}

void text(std::ostringstream& out, const Stmt& s, int depth) {
  const std::string pad(2 * depth, ' ');
  switch (s.kind) {
    case StmtKind::declare:
      out << pad << "var " << s.name << ": " << to_string(s.type);
      if (s.value.defined()) out << " = " << text(s.value);
      out << "\n";
      return;
    case StmtKind::assign:
      out << pad << s.name << " = " << text(s.value) << "\n";
      return;
    case StmtKind::store:
      out << pad << (s.streaming ? "store.cs " : "store ") << text(s.pointer) << ", "
          << text(s.value) << "\n";
      return;
    case StmtKind::atomic_max:
      out << pad << "atomic_max " << text(s.pointer) << ", " << text(s.value) << "\n";
      return;
    case StmtKind::if_:
      out << pad << "if " << text(s.cond) << "\n";
      for (const auto& b : s.body) text(out, b, depth + 1);
      if (!s.else_body.empty()) {
        out << pad << "else\n";
        for (const auto& b : s.else_body) text(out, b, depth + 1);
      }
      return;
    case StmtKind::for_:
      out << pad << "for " << s.name << " in [" << text(s.begin) << ", " << text(s.end) << ") step "
          << text(s.step);
      if (s.unroll == 1) out << " unrolled";
      if (s.unroll > 1) out << " unrolled by " << s.unroll;
      out << "\n";
      for (const auto& b : s.body) text(out, b, depth + 1);
      return;
    case StmtKind::sync_threads:
      out << pad << "sync_threads\n";
      return;
    case StmtKind::sync_warp:
      out << pad << "sync_warp\n";
      return;
    case StmtKind::return_:
      out << pad << "return\n";
      return;
    case StmtKind::comment:
      out << pad << "# " << s.name << "\n";
      return;
  }
}

}  // namespace

std::string print(const Kernel& k) {
  std::ostringstream out;
  out << "kernel " << k.name << "(";
  for (std::size_t i = 0; i < k.params.size(); ++i)
    out << (i ? ", " : "") << k.params[i].name << ": " << to_string(k.params[i].type)
        << (k.params[i].restrict_ ? " restrict" : "");
  out << ") threads " << k.max_threads;
  if (k.min_blocks > 0) out << " min_blocks " << k.min_blocks;
  out << "\n";
  for (const auto& a : k.shared)
    out << "  shared " << a.name << ": " << to_string(a.element) << "[" << a.count << "] align "
        << a.align << "\n";
  for (const auto& s : k.body) text(out, s, 1);
  return out.str();
}

}  // namespace fp8c::ir
