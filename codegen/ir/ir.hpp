// fp8c's kernel IR: a generated kernel's body as data, which backends lower
// (codegen/backends/cuda prints CUDA C++ for NVRTC, codegen/backends/llvm
// builds LLVM IR for the NVPTX target). A kernel description
// (codegen/kernels/*.hpp) is turned into one of these by its builder
// (codegen/kernels/*_ir.cpp); nothing here knows what a kernel computes.
//
// Expressions are immutable trees (shared nodes); statements are a tree of
// blocks. Mutable locals are named and declared once per kernel (the
// builder makes names unique), so both backends can give each its own slot:
// a C++ local, an LLVM alloca that mem2reg promotes.
//
// The semantics are fixed here, not left to a backend's defaults, so that
// both backends give the same bits:
//   - f32 arithmetic is IEEE with round to nearest even, no contraction of
//     a multiply and an add (an FMA is the explicit Op::fma), no flush of
//     subnormals; f32 division is IEEE (div.rn);
//   - integer arithmetic wraps; division, remainder, comparison, min/max
//     and the right shift follow the type's signedness; a shift by the
//     type's width or more is undefined, as in both backends;
//   - conversions: integer -> integer truncates or extends by the source's
//     signedness, integer -> f32 rounds to nearest even, f32 -> integer
//     rounds toward zero (a C cast); the FP8 and 16-bit float conversions
//     are explicit operations with their rounding in the name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fp8c::ir {

enum class Scalar : std::uint8_t { pred, u8, u16, u32, i32, u64, i64, f32 };
enum class Space : std::uint8_t { none, global, shared };

// A value's type: a scalar, a short vector of one (lanes > 1, for wide
// memory accesses: u32 x2, u32 x4, f32 x4), or a pointer to one of those in
// a memory space. A read-only pointer never stores; with `restrict` it is
// also not written through any other pointer while the kernel runs, so its
// loads may go through the read-only cache.
struct Type {
  Scalar scalar = Scalar::u32;
  int lanes = 1;
  Space space = Space::none;  // not none: a pointer to (scalar, lanes)
  bool read_only = false;     // pointers only

  bool is_pointer() const { return space != Space::none; }
  bool is_vector() const { return !is_pointer() && lanes > 1; }
  bool is_float() const { return !is_pointer() && scalar == Scalar::f32; }
  bool is_int() const {
    return !is_pointer() && lanes == 1 && scalar != Scalar::f32 && scalar != Scalar::pred;
  }
  bool is_signed() const { return scalar == Scalar::i32 || scalar == Scalar::i64; }
  bool is_pred() const { return !is_pointer() && scalar == Scalar::pred; }
  int scalar_bits() const;
  int bytes() const;  // of the value (pointee for a pointer: bytes(pointee()))
  Type element() const { return {scalar, 1, Space::none, false}; }
  Type pointee() const { return {scalar, lanes, Space::none, false}; }
  Type pointer_to(Space s, bool ro = false) const { return {scalar, lanes, s, ro}; }
  bool operator==(const Type&) const = default;
};

inline constexpr Type kPred{Scalar::pred}, kU8{Scalar::u8}, kU16{Scalar::u16}, kU32{Scalar::u32},
    kI32{Scalar::i32}, kU64{Scalar::u64}, kI64{Scalar::i64}, kF32{Scalar::f32},
    kU32x2{Scalar::u32, 2}, kU32x4{Scalar::u32, 4}, kF32x4{Scalar::f32, 4};

std::string to_string(const Type& t);  // "u32", "f32x4", "global const u8*"

enum class Op : std::uint8_t {
  // Leaves.
  constant,  // int_value (integers, pred) or float_value (f32)
  var,       // a parameter, a local or a shared array (name)
  special,   // a special register (special)
  // Arithmetic on equal types (scalars; pred for and/or/xor/not).
  add,
  sub,
  mul,
  div,
  rem,
  min,
  max,
  bit_and,
  bit_or,
  bit_xor,
  shl,
  shr,
  bit_not,
  neg,
  lt,
  le,
  gt,
  ge,
  eq,
  ne,       // -> pred
  select,   // args: pred, a, b
  convert,  // numeric conversion to `type`
  bitcast,  // same size, same bits
  // Memory.
  index,        // pointer + args[1] elements of its pointee (same pointer type)
  reinterpret,  // the same address as a pointer to another pointee
  load,         // *pointer (type: the pointee)
  lane,         // element `lane` of a vector
  make_vector,  // a vector of its args
  // Intrinsics with fixed semantics (ir.cpp documents each constructor).
  fma,          // f32 a * b + c, rounded once
  shfl_xor,     // u32 from the lane (this lane ^ args[1]) of the full warp
  pack_e4m3x2,  // u16: cvt.rn.satfinite.e4m3x2.f32 (args: lo, hi; lo in the low byte)
  pack_e5m2x2,  // u16: the E5M2 form
  f16_to_f32,   // f32 from fp16 bits (exact)
  f32_to_f16,   // u16: fp16 bits, nearest even
  f32_to_bf16,  // u16: bf16 bits, nearest even
  // Two values at once (one instruction for both); lo in the low half:
  pack_bf16x2,    // u32: two f32 as bf16 bits, nearest even (args: lo, hi)
  pack_f16x2,     // u32: two f32 as fp16 bits, nearest even (args: lo, hi)
  unpack_e4m3x2,  // u32: two E4M3 codes (u16, low byte first) as fp16 bits, exactly
  unpack_e5m2x2,  // u32: the E5M2 form
  byte_perm,      // u32: prmt.b32 (args: a, b, selector)
  clz,            // u32 leading zeros of a u32
  tanh_approx,    // f32 tanh.approx.f32
  ex2_approx,     // f32 ex2.approx.f32 (2^x)
  div_approx,     // f32 div.approx.f32 (a / b, fast and approximate)
  address,        // u64: a pointer's address (arg: any pointer), for alignment tests
};

// The operation's name in the text form (and in the constructors' errors): "add", "pack_e4m3x2".
const char* op_name(Op op);

enum class Special : std::uint8_t { tid_x, ctaid_x, ctaid_y, ctaid_z, ntid_x, nctaid_x, nctaid_y };

struct ExprNode;

// A handle on an immutable expression node; cheap to copy.
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}
  const ExprNode& operator*() const { return *node_; }
  const ExprNode* operator->() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  const Type& type() const;

 private:
  std::shared_ptr<const ExprNode> node_;
};

struct ExprNode {
  ExprNode(Op o, Type t, std::vector<Expr> a = {}) : op(o), type(t), args(std::move(a)) {}
  Op op;
  Type type;
  std::vector<Expr> args;
  std::int64_t int_value = 0;
  float float_value = 0;
  std::string name;  // var
  Special special = Special::tid_x;
  int lane = 0;
};

// ---- Expression constructors. Each checks its operands' types and throws
// std::invalid_argument naming the operation when they do not fit.

Expr constant(Type t, std::int64_t v);  // an integer or pred constant
Expr f32(float v);
Expr i32(std::int64_t v);
Expr u32(std::int64_t v);
Expr i64(std::int64_t v);
Expr pred(bool v);
Expr special(Special s);  // i32
Expr binary(Op op, Expr a, Expr b);
Expr unary(Op op, Expr a);
Expr select(Expr c, Expr a, Expr b);
Expr convert(Expr a, Type to);
Expr wide(Expr i);  // convert(i, kI64): an index or offset in 64 bits
Expr bitcast(Expr a, Type to);
Expr index(Expr pointer, Expr i);  // i: an integer of any width
Expr reinterpret(Expr pointer, Type pointee);
Expr load(Expr pointer);
Expr lane(Expr vector, int k);
Expr make_vector(const std::vector<Expr>& elements);
Expr intrinsic(Op op, const std::vector<Expr>& args);

// Operators for readable builders. An int on one side takes the other
// side's type.
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);
Expr operator%(Expr a, Expr b);
Expr operator&(Expr a, Expr b);
Expr operator|(Expr a, Expr b);
Expr operator^(Expr a, Expr b);
Expr operator<<(Expr a, Expr b);
Expr operator>>(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator==(Expr a, Expr b);
Expr operator!=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);  // pred
Expr operator||(Expr a, Expr b);  // pred
Expr operator!(Expr a);           // pred (or bitwise on integers)
Expr operator~(Expr a);
Expr operator-(Expr a);
#define FP8C_IR_INT_OPERATOR(op)            \
  Expr operator op(Expr a, std::int64_t b); \
  Expr operator op(std::int64_t a, Expr b);
FP8C_IR_INT_OPERATOR(+)
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
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);

// ---- Statements.

enum class StmtKind : std::uint8_t {
  declare,     // a mutable local `name` of `type`, set to `value` (may be undefined: no value)
  assign,      // name = value
  store,       // *pointer = value; streaming: evict-first (st.global.cs)
  atomic_max,  // atomic max of the u32 at pointer (global) with value
  if_,         // cond, then body, else else_body
  for_,        // name (i32) from begin while < end, += step; unroll: 0 none, 1 full, n by n
  sync_threads,
  sync_warp,
  return_,
  comment,  // text in `name`
};

struct Stmt {
  explicit Stmt(StmtKind k) : kind(k) {}
  StmtKind kind;
  std::string name;
  Type type;
  Expr pointer, value, cond, begin, end, step;
  std::vector<Stmt> body, else_body;
  int unroll = 0;
  bool streaming = false;
};

struct Param {
  std::string name;
  Type type;
  bool restrict_ = false;  // pointers: no other pointer reaches its data
};

struct SharedArray {
  std::string name;
  Type element;  // a scalar
  int count = 0;
  int align = 16;
};

struct Kernel {
  std::string name;     // the entry point
  std::string summary;  // a comment for the printed forms
  std::vector<Param> params;
  std::vector<SharedArray> shared;
  int max_threads = 256;  // threads per block the kernel is built for
  int min_blocks = 0;     // blocks per SM the compiler must fit (0: none)
  std::vector<Stmt> body;
};

// The IR as text, for `fp8c emit --ir` and test failures.
std::string print(const Kernel& kernel);

}  // namespace fp8c::ir
