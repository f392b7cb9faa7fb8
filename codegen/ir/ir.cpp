// The IR's constructors: every expression is type-checked where it is made,
// so a backend can trust the tree it is given.
#include "codegen/ir/ir.hpp"

#include <stdexcept>

namespace fp8c::ir {

int Type::scalar_bits() const {
  switch (scalar) {
    case Scalar::pred:
      return 1;
    case Scalar::u8:
      return 8;
    case Scalar::u16:
      return 16;
    case Scalar::u32:
    case Scalar::i32:
    case Scalar::f32:
      return 32;
    case Scalar::u64:
    case Scalar::i64:
      return 64;
  }
  return 0;
}

int Type::bytes() const {
  if (scalar == Scalar::pred) return 1;
  return scalar_bits() / 8 * lanes;
}

namespace {

const char* scalar_name(Scalar s) {
  switch (s) {
    case Scalar::pred:
      return "pred";
    case Scalar::u8:
      return "u8";
    case Scalar::u16:
      return "u16";
    case Scalar::u32:
      return "u32";
    case Scalar::i32:
      return "i32";
    case Scalar::u64:
      return "u64";
    case Scalar::i64:
      return "i64";
    case Scalar::f32:
      return "f32";
  }
  return "?";
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("kernel IR: " + what);
}

Expr make(ExprNode n) {
  return Expr(std::make_shared<const ExprNode>(std::move(n)));
}

bool arithmetic(Op op) {
  switch (op) {
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::rem:
    case Op::min:
    case Op::max:
    case Op::bit_and:
    case Op::bit_or:
    case Op::bit_xor:
    case Op::shl:
    case Op::shr:
      return true;
    default:
      return false;
  }
}

bool comparison(Op op) {
  return op == Op::lt || op == Op::le || op == Op::gt || op == Op::ge || op == Op::eq ||
         op == Op::ne;
}

bool scalar_value(const Type& t) {
  return !t.is_pointer() && t.lanes == 1;
}

}  // namespace

std::string to_string(const Type& t) {
  std::string s = scalar_name(t.scalar);
  if (t.lanes > 1) s += "x" + std::to_string(t.lanes);
  if (!t.is_pointer()) return s;
  return std::string(t.space == Space::global ? "global " : "shared ") +
         (t.read_only ? "const " : "") + s + "*";
}

const Type& Expr::type() const {
  if (!node_) fail("an undefined expression has no type");
  return node_->type;
}

Expr constant(Type t, std::int64_t v) {
  if (!t.is_int() && !t.is_pred()) fail("an integer constant of type " + to_string(t));
  ExprNode n{Op::constant, t};
  n.int_value = t.is_pred() ? (v != 0) : v;
  return make(std::move(n));
}

Expr f32(float v) {
  ExprNode n{Op::constant, kF32};
  n.float_value = v;
  return make(std::move(n));
}

Expr i32(std::int64_t v) {
  return constant(kI32, v);
}
Expr u32(std::int64_t v) {
  return constant(kU32, v);
}
Expr i64(std::int64_t v) {
  return constant(kI64, v);
}
Expr pred(bool v) {
  return constant(kPred, v);
}

Expr special(Special s) {
  ExprNode n{Op::special, kI32};
  n.special = s;
  return make(std::move(n));
}

Expr binary(Op op, Expr a, Expr b) {
  const Type& ta = a.type();
  const Type& tb = b.type();
  if (!(ta == tb))
    fail(std::string(op_name(op)) + " of " + to_string(ta) + " and " + to_string(tb));
  if (!scalar_value(ta)) fail(std::string(op_name(op)) + " of " + to_string(ta));
  Type result = ta;
  if (comparison(op)) {
    if (ta.is_pred() && op != Op::eq && op != Op::ne) fail("ordering of predicates");
    result = kPred;
  } else if (!arithmetic(op)) {
    fail(std::string(op_name(op)) + " is not a binary operation");
  } else if (ta.is_pred() && op != Op::bit_and && op != Op::bit_or && op != Op::bit_xor) {
    fail(std::string(op_name(op)) + " of predicates");
  } else if (ta.is_float() && (op == Op::rem || op == Op::bit_and || op == Op::bit_or ||
                               op == Op::bit_xor || op == Op::shl || op == Op::shr)) {
    fail(std::string(op_name(op)) + " of f32");
  }
  return make({op, result, {std::move(a), std::move(b)}});
}

Expr unary(Op op, Expr a) {
  const Type& t = a.type();
  if (!scalar_value(t)) fail(std::string(op_name(op)) + " of " + to_string(t));
  if (op == Op::neg && t.is_pred()) fail("neg of pred");
  if (op == Op::bit_not && t.is_float()) fail("not of f32");
  if (op != Op::neg && op != Op::bit_not) fail(std::string(op_name(op)) + " is not unary");
  return make({op, t, {std::move(a)}});
}

Expr select(Expr c, Expr a, Expr b) {
  if (!c.type().is_pred()) fail("select's condition is " + to_string(c.type()));
  if (!(a.type() == b.type()))
    fail("select of " + to_string(a.type()) + " and " + to_string(b.type()));
  const Type t = a.type();
  return make({Op::select, t, {std::move(c), std::move(a), std::move(b)}});
}

Expr convert(Expr a, Type to) {
  if (!scalar_value(a.type()) || !scalar_value(to) || to.is_pred())
    fail("convert " + to_string(a.type()) + " to " + to_string(to));
  if (a.type() == to) return a;
  return make({Op::convert, to, {std::move(a)}});
}

Expr wide(Expr i) {
  return convert(std::move(i), kI64);
}

Expr bitcast(Expr a, Type to) {
  if (!scalar_value(a.type()) || !scalar_value(to) || a.type().bytes() != to.bytes() ||
      a.type().is_pred() || to.is_pred())
    fail("bitcast " + to_string(a.type()) + " to " + to_string(to));
  if (a.type() == to) return a;
  return make({Op::bitcast, to, {std::move(a)}});
}

Expr index(Expr pointer, Expr i) {
  if (!pointer.type().is_pointer()) fail("index into " + to_string(pointer.type()));
  if (!i.type().is_int()) fail("index by " + to_string(i.type()));
  const Type t = pointer.type();
  return make({Op::index, t, {std::move(pointer), std::move(i)}});
}

Expr reinterpret(Expr pointer, Type pointee) {
  const Type& t = pointer.type();
  if (!t.is_pointer() || pointee.is_pointer() || pointee.is_pred())
    fail("reinterpret " + to_string(t) + " as a pointer to " + to_string(pointee));
  const Type to = pointee.pointer_to(t.space, t.read_only);
  if (to == t) return pointer;
  return make({Op::reinterpret, to, {std::move(pointer)}});
}

Expr load(Expr pointer) {
  if (!pointer.type().is_pointer()) fail("load from " + to_string(pointer.type()));
  const Type t = pointer.type().pointee();
  return make({Op::load, t, {std::move(pointer)}});
}

Expr lane(Expr vector, int k) {
  const Type& t = vector.type();
  if (!t.is_vector() || k < 0 || k >= t.lanes)
    fail("lane " + std::to_string(k) + " of " + to_string(t));
  ExprNode n{Op::lane, t.element(), {std::move(vector)}};
  n.lane = k;
  return make(std::move(n));
}

Expr make_vector(const std::vector<Expr>& elements) {
  if (elements.size() < 2 || elements.size() > 4 || elements.size() == 3)
    fail("a vector of " + std::to_string(elements.size()) + " lanes");
  const Type e = elements[0].type();
  if (!scalar_value(e) || (e.scalar != Scalar::u32 && e.scalar != Scalar::f32))
    fail("a vector of " + to_string(e));
  for (const auto& x : elements)
    if (!(x.type() == e)) fail("a vector of mixed " + to_string(e) + " and " + to_string(x.type()));
  Type t = e;
  t.lanes = static_cast<int>(elements.size());
  return make({Op::make_vector, t, elements});
}

Expr intrinsic(Op op, const std::vector<Expr>& args) {
  // Each intrinsic's operand types, then its result.
  const auto want = [&](const char* what, std::vector<Type> types, Type result) {
    if (args.size() != types.size())
      fail(std::string(what) + " takes " + std::to_string(types.size()) + " operands");
    for (std::size_t i = 0; i < args.size(); ++i)
      if (!(args[i].type() == types[i]))
        fail(std::string(what) + " operand " + std::to_string(i) + " is " +
             to_string(args[i].type()) + ", not " + to_string(types[i]));
    return make({op, result, args});
  };
  switch (op) {
    case Op::fma:
      return want("fma", {kF32, kF32, kF32}, kF32);
    case Op::shfl_xor:
      return want("shfl_xor", {kU32, kI32}, kU32);
    case Op::pack_e4m3x2:
      return want("pack_e4m3x2", {kF32, kF32}, kU16);
    case Op::pack_e5m2x2:
      return want("pack_e5m2x2", {kF32, kF32}, kU16);
    case Op::f16_to_f32:
      return want("f16_to_f32", {kU16}, kF32);
    case Op::f32_to_f16:
      return want("f32_to_f16", {kF32}, kU16);
    case Op::f32_to_bf16:
      return want("f32_to_bf16", {kF32}, kU16);
    case Op::pack_bf16x2:
      return want("pack_bf16x2", {kF32, kF32}, kU32);
    case Op::pack_f16x2:
      return want("pack_f16x2", {kF32, kF32}, kU32);
    case Op::unpack_e4m3x2:
      return want("unpack_e4m3x2", {kU16}, kU32);
    case Op::unpack_e5m2x2:
      return want("unpack_e5m2x2", {kU16}, kU32);
    case Op::byte_perm:
      return want("byte_perm", {kU32, kU32, kU32}, kU32);
    case Op::clz:
      return want("clz", {kU32}, kU32);
    case Op::tanh_approx:
      return want("tanh_approx", {kF32}, kF32);
    case Op::ex2_approx:
      return want("ex2_approx", {kF32}, kF32);
    case Op::div_approx:
      return want("div_approx", {kF32, kF32}, kF32);
    case Op::address:
      if (args.size() != 1 || !args[0].type().is_pointer())
        fail("address takes one pointer operand");
      return make({op, kU64, args});
    default:
      fail("not an intrinsic");
  }
}

namespace {

// An int literal beside an expression takes the expression's type.
Expr like(const Expr& e, std::int64_t v) {
  const Type& t = e.type();
  if (t.is_float()) return f32(static_cast<float>(v));
  return constant(t, v);
}

}  // namespace

Expr operator+(Expr a, Expr b) {
  if (a.type().is_pointer()) return index(std::move(a), std::move(b));
  return binary(Op::add, std::move(a), std::move(b));
}
Expr operator-(Expr a, Expr b) {
  return binary(Op::sub, std::move(a), std::move(b));
}
Expr operator*(Expr a, Expr b) {
  return binary(Op::mul, std::move(a), std::move(b));
}
Expr operator/(Expr a, Expr b) {
  return binary(Op::div, std::move(a), std::move(b));
}
Expr operator%(Expr a, Expr b) {
  return binary(Op::rem, std::move(a), std::move(b));
}
Expr operator&(Expr a, Expr b) {
  return binary(Op::bit_and, std::move(a), std::move(b));
}
Expr operator|(Expr a, Expr b) {
  return binary(Op::bit_or, std::move(a), std::move(b));
}
Expr operator^(Expr a, Expr b) {
  return binary(Op::bit_xor, std::move(a), std::move(b));
}
Expr operator<<(Expr a, Expr b) {
  return binary(Op::shl, std::move(a), std::move(b));
}
Expr operator>>(Expr a, Expr b) {
  return binary(Op::shr, std::move(a), std::move(b));
}
Expr operator<(Expr a, Expr b) {
  return binary(Op::lt, std::move(a), std::move(b));
}
Expr operator<=(Expr a, Expr b) {
  return binary(Op::le, std::move(a), std::move(b));
}
Expr operator>(Expr a, Expr b) {
  return binary(Op::gt, std::move(a), std::move(b));
}
Expr operator>=(Expr a, Expr b) {
  return binary(Op::ge, std::move(a), std::move(b));
}
Expr operator==(Expr a, Expr b) {
  return binary(Op::eq, std::move(a), std::move(b));
}
Expr operator!=(Expr a, Expr b) {
  return binary(Op::ne, std::move(a), std::move(b));
}
Expr operator&&(Expr a, Expr b) {
  if (!a.type().is_pred()) fail("&& of " + to_string(a.type()));
  return binary(Op::bit_and, std::move(a), std::move(b));
}
Expr operator||(Expr a, Expr b) {
  if (!a.type().is_pred()) fail("|| of " + to_string(a.type()));
  return binary(Op::bit_or, std::move(a), std::move(b));
}
Expr operator!(Expr a) {
  return unary(Op::bit_not, std::move(a));
}
Expr operator~(Expr a) {
  return unary(Op::bit_not, std::move(a));
}
Expr operator-(Expr a) {
  return unary(Op::neg, std::move(a));
}

#define FP8C_IR_INT_OPERATOR(op)             \
  Expr operator op(Expr a, std::int64_t b) { \
    Expr rhs = like(a, b);                   \
    return std::move(a) op std::move(rhs);   \
  }                                          \
  Expr operator op(std::int64_t a, Expr b) { \
    Expr lhs = like(b, a);                   \
    return std::move(lhs) op std::move(b);   \
  }
FP8C_IR_INT_OPERATOR(-)
FP8C_IR_INT_OPERATOR(*)
FP8C_IR_INT_OPERATOR(/)
FP8C_IR_INT_OPERATOR(%)
FP8C_IR_INT_OPERATOR(&)
FP8C_IR_INT_OPERATOR(|)
FP8C_IR_INT_OPERATOR(^)
FP8C_IR_INT_OPERATOR(<<)
FP8C_IR_INT_OPERATOR(>>)
FP8C_IR_INT_OPERATOR(<)
FP8C_IR_INT_OPERATOR(<=)
FP8C_IR_INT_OPERATOR(>)
FP8C_IR_INT_OPERATOR(>=)
FP8C_IR_INT_OPERATOR(==)
FP8C_IR_INT_OPERATOR(!=)
#undef FP8C_IR_INT_OPERATOR

// + with a pointer on the left indexes it; the literal is then an i64 offset.
Expr operator+(Expr a, std::int64_t b) {
  Expr rhs = a.type().is_pointer() ? i64(b) : like(a, b);
  return std::move(a) + std::move(rhs);
}
Expr operator+(std::int64_t a, Expr b) {
  Expr lhs = like(b, a);
  return std::move(lhs) + std::move(b);
}

Expr min(Expr a, Expr b) {
  return binary(Op::min, std::move(a), std::move(b));
}
Expr max(Expr a, Expr b) {
  return binary(Op::max, std::move(a), std::move(b));
}

}  // namespace fp8c::ir
