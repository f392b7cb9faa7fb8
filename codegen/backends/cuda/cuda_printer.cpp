#include "codegen/backends/cuda/cuda_printer.hpp"

#include <bit>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fp8c::cuda {
namespace {

using ir::Expr;
using ir::Op;
using ir::Scalar;
using ir::Stmt;
using ir::StmtKind;
using ir::Type;

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("CUDA printer: " + what);
}

// The IR's own names, which the source's typedefs define (one word each, so
// that `i64(x)` is a valid functional cast), except where C++ has the type.
std::string scalar_type(Scalar s) {
  switch (s) {
    case Scalar::pred:
      return "bool";
    case Scalar::i32:
      return "int";
    case Scalar::f32:
      return "float";
    default:
      return ir::to_string(Type{s});
  }
}

std::string value_type(const Type& t) {
  if (t.lanes == 1) return scalar_type(t.scalar);
  if (t.scalar == Scalar::u32 && t.lanes == 2) return "uint2";
  if (t.scalar == Scalar::u32 && t.lanes == 4) return "uint4";
  if (t.scalar == Scalar::f32 && t.lanes == 4) return "float4";
  fail("no CUDA type for " + ir::to_string(t));
}

std::string pointer_type(const Type& t) {
  return std::string(t.read_only ? "const " : "") + value_type(t.pointee()) + "*";
}

std::string type_name(const Type& t) {
  return t.is_pointer() ? pointer_type(t) : value_type(t);
}

std::string float_literal(float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  // Infinities and NaNs have no literal; every other float is exact in hex.
  if ((bits & 0x7F800000u) == 0x7F800000u) {
    char b[32];
    std::snprintf(b, sizeof b, "__uint_as_float(0x%08Xu)", bits);
    return b;
  }
  char b[48];
  std::snprintf(b, sizeof b, "%af", static_cast<double>(v));
  return b;
}

std::string int_literal(const Type& t, std::int64_t v) {
  switch (t.scalar) {
    case Scalar::pred:
      return v ? "true" : "false";
    case Scalar::u8:
      return "u8(" + std::to_string(v & 0xFF) + "u)";
    case Scalar::u16:
      return "u16(" + std::to_string(v & 0xFFFF) + "u)";
    case Scalar::u32:
      return std::to_string(static_cast<std::uint32_t>(v)) + "u";
    case Scalar::i32:
      if (v == INT32_MIN) return "(-2147483647 - 1)";
      return v < 0 ? "(" + std::to_string(static_cast<std::int32_t>(v)) + ")"
                   : std::to_string(static_cast<std::int32_t>(v));
    case Scalar::u64:
      return std::to_string(static_cast<std::uint64_t>(v)) + "ull";
    case Scalar::i64:
      if (v == INT64_MIN) return "(-9223372036854775807ll - 1)";
      return v < 0 ? "(" + std::to_string(v) + "ll)" : std::to_string(v) + "ll";
    default:
      fail("an integer literal of " + ir::to_string(t));
  }
}

const char* special_name(ir::Special s) {
  switch (s) {
    case ir::Special::tid_x:
      return "threadIdx.x";
    case ir::Special::ctaid_x:
      return "blockIdx.x";
    case ir::Special::ctaid_y:
      return "blockIdx.y";
    case ir::Special::ctaid_z:
      return "blockIdx.z";
    case ir::Special::ntid_x:
      return "blockDim.x";
    case ir::Special::nctaid_x:
      return "gridDim.x";
    case ir::Special::nctaid_y:
      return "gridDim.y";
  }
  return "?";
}

const char* infix(Op op) {
  switch (op) {
    case Op::add:
      return "+";
    case Op::sub:
      return "-";
    case Op::mul:
      return "*";
    case Op::div:
      return "/";
    case Op::rem:
      return "%";
    case Op::bit_and:
      return "&";
    case Op::bit_or:
      return "|";
    case Op::bit_xor:
      return "^";
    case Op::shl:
      return "<<";
    case Op::shr:
      return ">>";
    case Op::lt:
      return "<";
    case Op::le:
      return "<=";
    case Op::gt:
      return ">";
    case Op::ge:
      return ">=";
    case Op::eq:
      return "==";
    case Op::ne:
      return "!=";
    default:
      return nullptr;
  }
}

// The helper functions the printed intrinsics call, each printed once and
// only when used: device (inline asm) and host (the emulation's twins).
struct Helper {
  const char* device;
  const char* host;
};

Helper helper(Op op) {
  switch (op) {
    case Op::pack_e4m3x2:
      return {R"(__device__ __forceinline__ u16 ir_pack_e4m3x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
)",
              "inline u16 ir_pack_e4m3x2(float lo, float hi) { return host_pack(lo, hi, "
              "ElemType::e4m3); }\n"};
    case Op::pack_e5m2x2:
      return {R"(__device__ __forceinline__ u16 ir_pack_e5m2x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
)",
              "inline u16 ir_pack_e5m2x2(float lo, float hi) { return host_pack(lo, hi, "
              "ElemType::e5m2); }\n"};
    case Op::f16_to_f32:
      return {R"(__device__ __forceinline__ float ir_f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
)",
              "inline float ir_f16_to_f32(u16 h) { return host_fp16_to_float(h); }\n"};
    case Op::f32_to_f16:
      return {R"(__device__ __forceinline__ u16 ir_f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
)",
              "inline u16 ir_f32_to_f16(float f) { return host_float_to_fp16(f); }\n"};
    case Op::f32_to_bf16:
      return {R"(__device__ __forceinline__ u16 ir_f32_to_bf16(float f) {
  u16 b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}
)",
              "inline u16 ir_f32_to_bf16(float f) { return host_float_to_bf16(f); }\n"};
    case Op::pack_bf16x2:
      return {R"(__device__ __forceinline__ u32 ir_pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
)",
              "inline u32 ir_pack_bf16x2(float lo, float hi) { return host_float_to_bf16(lo) | "
              "(u32(host_float_to_bf16(hi)) << 16); }\n"};
    case Op::pack_f16x2:
      return {R"(__device__ __forceinline__ u32 ir_pack_f16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
)",
              "inline u32 ir_pack_f16x2(float lo, float hi) { return host_float_to_fp16(lo) | "
              "(u32(host_float_to_fp16(hi)) << 16); }\n"};
    case Op::unpack_e4m3x2:
      return {R"(__device__ __forceinline__ u32 ir_unpack_e4m3x2(u16 codes) {
  u32 r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(codes));
  return r;
}
)",
              "inline u32 ir_unpack_e4m3x2(u16 codes) { return host_unpack_fp8x2(codes, "
              "ElemType::e4m3); }\n"};
    case Op::unpack_e5m2x2:
      return {R"(__device__ __forceinline__ u32 ir_unpack_e5m2x2(u16 codes) {
  u32 r;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(codes));
  return r;
}
)",
              "inline u32 ir_unpack_e5m2x2(u16 codes) { return host_unpack_fp8x2(codes, "
              "ElemType::e5m2); }\n"};
    case Op::tanh_approx:
      return {R"(__device__ __forceinline__ float ir_tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
)",
              "inline float ir_tanh_approx(float x) { return std::tanh(x); }\n"};
    case Op::ex2_approx:
      return {R"(__device__ __forceinline__ float ir_ex2_approx(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
)",
              "inline float ir_ex2_approx(float x) { return std::exp2(x); }\n"};
    case Op::div:  // f32 only: IEEE division whatever NVRTC's -prec-div, -ftz or fast math
      return {R"(__device__ __forceinline__ float ir_div_rn(float a, float b) {
  float q;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
}
)",
              "inline float ir_div_rn(float a, float b) { return a / b; }\n"};
    case Op::div_approx:
      return {R"(__device__ __forceinline__ float ir_div_approx(float a, float b) {
  float y;
  asm("div.approx.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
)",
              "inline float ir_div_approx(float a, float b) { return a / b; }\n"};
    default:
      return {nullptr, nullptr};
  }
}

// Streaming (evict-first) stores, by the stored type.
const char* streaming_store_helper(const Type& t, bool host) {
  if (host) {
    if (t == ir::kU16) return "inline void ir_store_cs(u16* p, u16 v) { *p = v; }\n";
    if (t == ir::kU32) return "inline void ir_store_cs(u32* p, u32 v) { *p = v; }\n";
    if (t == ir::kU32x2)
      return "inline void ir_store_cs(uint2* p, uint2 v) { host_check_aligned(p, 8); *p = v; }\n";
    if (t == ir::kU32x4)
      return "inline void ir_store_cs(uint4* p, uint4 v) { host_check_aligned(p, 16); *p = v; }\n";
  } else {
    if (t == ir::kU16)
      return R"(__device__ __forceinline__ void ir_store_cs(u16* p, u16 v) {
  asm volatile("st.global.cs.u16 [%0], %1;" :: "l"(p), "h"(v) : "memory");
}
)";
    if (t == ir::kU32)
      return R"(__device__ __forceinline__ void ir_store_cs(u32* p, u32 v) {
  asm volatile("st.global.cs.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
)";
    if (t == ir::kU32x2)
      return R"(__device__ __forceinline__ void ir_store_cs(uint2* p, uint2 v) {
  asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(v.x), "r"(v.y) : "memory");
}
)";
    if (t == ir::kU32x4)
      return R"(__device__ __forceinline__ void ir_store_cs(uint4* p, uint4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
)";
  }
  fail("no streaming store of " + ir::to_string(t));
}

class Printer {
 public:
  explicit Printer(bool host) : host_(host) {}

  std::string expr(const Expr& e) {
    const ir::ExprNode& n = *e;
    switch (n.op) {
      case Op::constant:
        return n.type.is_float() ? float_literal(n.float_value) : int_literal(n.type, n.int_value);
      case Op::var:
        return n.name;
      case Op::special:
        return std::string("int(") + special_name(n.special) + ")";
      case Op::min:
      case Op::max: {
        const bool lo = n.op == Op::min;
        if (n.type.is_float())
          return std::string(lo ? "fminf(" : "fmaxf(") + expr(n.args[0]) + ", " + expr(n.args[1]) +
                 ")";
        if (n.type.scalar_bits() < 32) fail("min/max of " + ir::to_string(n.type));
        return std::string(lo ? "min(" : "max(") + expr(n.args[0]) + ", " + expr(n.args[1]) + ")";
      }
      case Op::bit_not:
        return std::string(n.type.is_pred() ? "(!" : "wrap<") +
               (n.type.is_pred() ? expr(n.args[0]) + ")"
                                 : value_type(n.type) + ">(~" + expr(n.args[0]) + ")");
      case Op::neg:
        return n.type.is_float() || n.type.scalar_bits() >= 32
                   ? "(-" + expr(n.args[0]) + ")"
                   : "wrap<" + value_type(n.type) + ">(-" + expr(n.args[0]) + ")";
      case Op::select:
        return "(" + expr(n.args[0]) + " ? " + expr(n.args[1]) + " : " + expr(n.args[2]) + ")";
      case Op::convert:
        return value_type(n.type) + "(" + expr(n.args[0]) + ")";
      case Op::bitcast:
        return bitcast(n.args[0], n.type);
      case Op::index:
        return "(" + expr(n.args[0]) + " + " + expr(n.args[1]) + ")";
      case Op::reinterpret:
        return "reinterpret_cast<" + pointer_type(n.type) + ">(" + expr(n.args[0]) + ")";
      case Op::load:
        return "(*" + expr(n.args[0]) + ")";
      case Op::lane:
        return "(" + expr(n.args[0]) + ")." + "xyzw"[n.lane];
      case Op::make_vector: {
        std::string s = "make_" + value_type(n.type) + "(";
        for (std::size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + expr(n.args[i]);
        return s + ")";
      }
      case Op::fma:
        return (host_ ? "std::fmaf(" : "__fmaf_rn(") + expr(n.args[0]) + ", " + expr(n.args[1]) +
               ", " + expr(n.args[2]) + ")";
      case Op::shfl_xor:
        return "__shfl_xor_sync(0xFFFFFFFFu, " + expr(n.args[0]) + ", " + expr(n.args[1]) + ")";
      case Op::byte_perm:
        return std::string(host_ ? "host_prmt(" : "__byte_perm(") + expr(n.args[0]) + ", " +
               expr(n.args[1]) + ", " + expr(n.args[2]) + ")";
      case Op::clz:
        return "u32(__clz(" + expr(n.args[0]) + "))";
      case Op::address:
        return "reinterpret_cast<u64>(" + expr(n.args[0]) + ")";
      case Op::pack_e4m3x2:
      case Op::pack_e5m2x2:
      case Op::f16_to_f32:
      case Op::f32_to_f16:
      case Op::f32_to_bf16:
      case Op::pack_bf16x2:
      case Op::pack_f16x2:
      case Op::unpack_e4m3x2:
      case Op::unpack_e5m2x2:
      case Op::tanh_approx:
      case Op::ex2_approx:
      case Op::div_approx: {
        helpers_.insert(n.op);
        std::string s = std::string("ir_") + intrinsic_name(n.op) + "(";
        for (std::size_t i = 0; i < n.args.size(); ++i) s += (i ? ", " : "") + expr(n.args[i]);
        return s + ")";
      }
      default:
        break;
    }
    const char* op = infix(n.op);
    if (op == nullptr) fail("an expression it cannot print");
    const Type& operand = n.args[0].type();
    // f32 arithmetic through the _rn intrinsics, which NVRTC never fuses
    // into an FMA: the IR fuses only where it says fma.
    if (operand.is_float() && n.op == Op::div) {
      helpers_.insert(Op::div);
      return "ir_div_rn(" + expr(n.args[0]) + ", " + expr(n.args[1]) + ")";
    }
    if (operand.is_float() && !host_ && !n.type.is_pred()) {
      const char* f = n.op == Op::add   ? "__fadd_rn("
                      : n.op == Op::sub ? "__fsub_rn("
                                        : "__fmul_rn(";
      if (n.op != Op::add && n.op != Op::sub && n.op != Op::mul)
        fail("f32 " + std::string(ir::op_name(n.op)));
      return f + expr(n.args[0]) + ", " + expr(n.args[1]) + ")";
    }
    if (operand.is_pred()) {
      if (n.op == Op::bit_and) return "(" + expr(n.args[0]) + " && " + expr(n.args[1]) + ")";
      if (n.op == Op::bit_or) return "(" + expr(n.args[0]) + " || " + expr(n.args[1]) + ")";
      if (n.op == Op::bit_xor) return "(" + expr(n.args[0]) + " != " + expr(n.args[1]) + ")";
    }
    std::string s = "(" + expr(n.args[0]) + " " + op + " " + expr(n.args[1]) + ")";
    // u8/u16 arithmetic promotes to int in C++: wrap back to the IR's type.
    if (!n.type.is_pred() && operand.scalar_bits() < 32 && !operand.is_pred())
      return "wrap<" + value_type(n.type) + ">" + s;
    return s;
  }

  void stmt(const Stmt& s, int depth) {
    const std::string pad(2 * depth, ' ');
    switch (s.kind) {
      case StmtKind::declare:
        out_ << pad << type_name(s.type) << " " << s.name;
        if (s.value.defined()) out_ << " = " << expr(s.value);
        out_ << ";\n";
        return;
      case StmtKind::assign:
        out_ << pad << s.name << " = " << expr(s.value) << ";\n";
        return;
      case StmtKind::store:
        if (s.streaming) {
          streaming_.insert(
              s.value.type().scalar == Scalar::u16 ? 0
              : s.value.type() == ir::kU32         ? 1
              : s.value.type() == ir::kU32x2       ? 2
              : s.value.type() == ir::kU32x4
                  ? 3
                  : (fail("no streaming store of " + ir::to_string(s.value.type())), 0));
          out_ << pad << "ir_store_cs(" << expr(s.pointer) << ", " << expr(s.value) << ");\n";
        } else {
          out_ << pad << "*" << expr(s.pointer) << " = " << expr(s.value) << ";\n";
        }
        return;
      case StmtKind::atomic_max:
        out_ << pad << "atomicMax(" << expr(s.pointer) << ", " << expr(s.value) << ");\n";
        return;
      case StmtKind::if_:
        out_ << pad << "if (" << expr(s.cond) << ") {\n";
        for (const auto& b : s.body) stmt(b, depth + 1);
        if (!s.else_body.empty()) {
          out_ << pad << "} else {\n";
          for (const auto& b : s.else_body) stmt(b, depth + 1);
        }
        out_ << pad << "}\n";
        return;
      case StmtKind::for_:
        if (s.unroll == 1)
          out_ << pad << "#pragma unroll\n";
        else if (s.unroll > 1)
          out_ << pad << "#pragma unroll " << s.unroll << "\n";
        out_ << pad << "for (int " << s.name << " = " << expr(s.begin) << "; " << s.name << " < "
             << expr(s.end) << "; " << s.name << " += " << expr(s.step) << ") {\n";
        for (const auto& b : s.body) stmt(b, depth + 1);
        out_ << pad << "}\n";
        return;
      case StmtKind::sync_threads:
        out_ << pad << "__syncthreads();\n";
        return;
      case StmtKind::sync_warp:
        out_ << pad << "__syncwarp();\n";
        return;
      case StmtKind::return_:
        out_ << pad << "return;\n";
        return;
      case StmtKind::comment:
        out_ << pad << "// " << s.name << "\n";
        return;
    }
  }

  std::string kernel(const ir::Kernel& k) {
    std::ostringstream head;
    out_ << "extern \"C\" __global__ void __launch_bounds__(" << k.max_threads;
    if (k.min_blocks > 0) out_ << ", " << k.min_blocks;
    out_ << ")\n" << k.name << "(";
    for (std::size_t i = 0; i < k.params.size(); ++i) {
      const ir::Param& p = k.params[i];
      out_ << (i ? ", " : "") << type_name(p.type) << (p.restrict_ ? " __restrict__ " : " ")
           << p.name;
    }
    out_ << ") {\n";
    for (const auto& a : k.shared)
      out_ << "  __shared__ __align__(" << a.align << ") " << value_type(a.element) << " " << a.name
           << "_array[" << a.count << "];\n  " << value_type(a.element) << "* const " << a.name
           << " = " << a.name << "_array;\n";
    for (const auto& s : k.body) stmt(s, 1);
    out_ << "}\n";

    std::string source = "// generated by fp8c from its kernel IR\n";
    if (!k.summary.empty()) source += comment_block(k.summary);
    source +=
        "typedef unsigned char u8;\ntypedef unsigned short u16;\ntypedef unsigned int u32;\n"
        "typedef unsigned long long u64;\ntypedef long long i64;\n";
    source +=
        "template <typename T, typename V> __device__ __forceinline__ T wrap(V v) { return T(v); "
        "}\n";
    for (Op op : helpers_) source += host_ ? helper(op).host : helper(op).device;
    static const Type kinds[] = {ir::kU16, ir::kU32, ir::kU32x2, ir::kU32x4};
    for (int i : streaming_) source += streaming_store_helper(kinds[i], host_);
    return source + out_.str();
  }

 private:
  static const char* intrinsic_name(Op op) {
    switch (op) {
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
      case Op::tanh_approx:
        return "tanh_approx";
      case Op::ex2_approx:
        return "ex2_approx";
      case Op::div_approx:
        return "div_approx";
      default:
        return "?";
    }
  }

  static std::string comment_block(const std::string& text) {
    std::string s = "// ";
    for (char c : text) {
      s += c;
      if (c == '\n') s += "// ";
    }
    return s + "\n";
  }

  std::string bitcast(const Expr& a, const Type& to) {
    const Type& from = a.type();
    if (from.is_float())
      return (to.is_signed() ? "__float_as_int(" : "__float_as_uint(") + expr(a) + ")";
    if (to.is_float())
      return (from.is_signed() ? "__int_as_float(" : "__uint_as_float(") + expr(a) + ")";
    return value_type(to) + "(" + expr(a) + ")";
  }

  bool host_;
  std::ostringstream out_;
  std::set<Op> helpers_;
  std::set<int> streaming_;
};

}  // namespace

std::string print(const ir::Kernel& kernel, bool for_host) {
  return Printer(for_host).kernel(kernel);
}

}  // namespace fp8c::cuda
