// Writes the kernel IR's host print (codegen/backends/cuda, for_host) of
// every emulated block and per-tensor quantize variant and of the other kinds
// built as IR, as C++ for the host (cuda_host.hpp): each kernel in a
// namespace of its own, its few PTX functions replaced by host twins, its
// shared arrays hoisted (see hoist_shared), its macros undefined after it,
// and a table of entry points per kind. Fails if a PTX function it does not
// know of appears, so a kernel change cannot silently escape the emulation.
//
//   emit_for_host BLOCK_QUANTIZE.inc QUANTIZE.inc IR_KERNELS.inc EPILOGUE.inc
//                 DEQUANTIZE.inc

#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/backends/cuda/cuda_printer.hpp"
#include "codegen/kernels/epilogue.hpp"
#include "codegen/kernels/dequantize.hpp"
#include "codegen/kernels/permute.hpp"
#include "codegen/kernels/transpose.hpp"
#include "emulation_variants.hpp"

namespace {

// The index of the brace that closes the one at `open`, skipping string
// literals (inline PTX has braces in its strings).
std::size_t closing_brace(const std::string& s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  throw std::runtime_error("unbalanced braces");
}

// Replaces the body of the function whose definition starts with `signature`
// (up to and including its opening brace), if the source has it.
void replace_body(std::string& s, const std::string& signature, const std::string& body) {
  const std::size_t at = s.find(signature);
  if (at == std::string::npos) return;
  if (s.find(signature, at + 1) != std::string::npos)
    throw std::runtime_error("defined twice: " + signature);
  const std::size_t open = at + signature.size() - 1;
  s.replace(open, closing_brace(s, open) - open + 1, "{ " + body + " }");
}

// The kernel's __shared__ arrays moved to namespace scope (the kernel keeps
// a reference of the same name), and a poison_shared() that fills them with
// 0xCD: run_grid calls it before every block, so a read of a slot no thread
// of this block wrote sees garbage, as on the GPU, not an earlier block's
// value or a zero.
std::string hoist_shared(const std::string& s) {
  const std::regex shared(
      R"(__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)((?:\[[^\]]+\])+);)");
  std::string body, arrays, poison;
  std::size_t last = 0;
  for (std::sregex_iterator m(s.begin(), s.end(), shared), end; m != end; ++m) {
    const std::string type = (*m)[1], name = (*m)[2], dims = (*m)[3];
    arrays += "alignas(16) " + type + " shared_" + name + dims + ";\n";
    poison += "  std::memset(shared_" + name + ", 0xCD, sizeof shared_" + name + ");\n";
    body += s.substr(last, static_cast<std::size_t>(m->position()) - last);
    body += "auto& " + name + " = shared_" + name + ";";
    last = static_cast<std::size_t>(m->position() + m->length());
  }
  body += s.substr(last);
  // The arrays go before the first kernel entry point, after the helpers
  // and typedefs they may use.
  const std::size_t kernel = body.find("extern \"C\" __global__");
  if (kernel == std::string::npos) throw std::runtime_error("no kernel entry point");
  return body.substr(0, kernel) + arrays + "inline void poison_shared() {\n" + poison + "}\n" +
         body.substr(kernel);
}

std::string host_source(std::string s) {
  const std::string f = "__device__ __forceinline__ ";
  replace_body(s, f + "float to_float(fp16_t x) {", "return host_fp16_to_float(x.bits);");
  replace_body(s, f + "void unpack2(u32 w, fp16_t, float& lo, float& hi) {",
               "lo = host_fp16_to_float(u16(w)); hi = host_fp16_to_float(u16(w >> 16));");
  replace_body(s, f + "u16 pack_e4m3x2(float lo, float hi) {",
               "return host_pack(lo, hi, ElemType::e4m3);");
  replace_body(s, f + "u16 pack_e5m2x2(float lo, float hi) {",
               "return host_pack(lo, hi, ElemType::e5m2);");
  // Wide stores must be aligned, as on the GPU.
  replace_body(s, f + "void store_streaming(u8* p, uint2 v) {",
               "host_check_aligned(p, 8); std::memcpy(p, &v, 8);");
  replace_body(s, f + "void store_streaming(u8* p, u32 v) {",
               "host_check_aligned(p, 4); std::memcpy(p, &v, 4);");
  replace_body(s, f + "void store_streaming(u8* p, uint4 v) {",
               "host_check_aligned(p, 16); std::memcpy(p, &v, 16); ++host_wide_stores;");
  replace_body(s, f + "u32 permute(u32 w, u32 selector) {", "return host_prmt(w, 0, selector);");
  // IEEE division, as div.rn.f32 (the current-scaling inverse).
  s = std::regex_replace(
      s,
      std::regex(
          R"re(asm\("div\.rn\.f32 %0, %1, %2;" : "=f"\((\w+)\) : "f"\(([^()]+)\), "f"\((\w+)\)\);)re"),
      "$1 = $2 / $3;");
  if (std::regex_search(s, std::regex(R"(\basm\s*(volatile\s*)?\()")))
    throw std::runtime_error("inline PTX without a host twin in emit_for_host.cpp");
  s = hoist_shared(s);
  const std::string linkage = "extern \"C\" ";
  for (std::size_t at; (at = s.find(linkage)) != std::string::npos;) s.erase(at, linkage.size());
  return s;
}

// Writes `text` to `path`, or throws.
void write_file(const char* path, const std::string& text) {
  std::ofstream file(path);
  file << "// Generated by tests/emulation/emit_for_host.cpp. Do not edit.\n" << text;
  if (!file) throw std::runtime_error(std::string("cannot write ") + path);
}

// Each kernel in its own namespace, its macros undefined after it.
void emit(std::ostringstream& out, const fp8c::KernelSource& k, const std::string& ns) {
  out << "namespace " << ns << " {\n"
      << host_source(k.source) << "\n}  // namespace " << ns << "\n";
  std::set<std::string> macros;
  const std::regex define(R"(#define (\w+))");
  for (std::sregex_iterator m(k.source.begin(), k.source.end(), define), end; m != end; ++m)
    macros.insert((*m)[1]);
  for (const auto& m : macros) out << "#undef " << m << "\n";
}

// The block quantize kernels, printed for the host from their IR. Their
// parameters are typed (u16 or f32 input, f32 or u8 scales); AnyPointer
// converts the table's untyped pointers to whichever each one is.
std::string block_quantize_kernels() {
  std::ostringstream out, table;
  const auto variants = fp8c::emulation::emulated_block_quantize_variants();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    fp8c::KernelSource k = fp8c::emit_cuda(variants[i]);
    k.source = fp8c::cuda::print(*k.ir, true);
    const std::string ns = std::string("k").append(std::to_string(i));
    emit(out, k, ns);
    const bool dact = variants[i].dact != fp8c::Activation::none;
    table << "    {\"" << k.entry << "\", [](const void* x, unsigned char* r, void* rs, "
          << "unsigned char* c, void* cs, int rows, int cols, const void* pre) { " << ns
          << "::" << k.entry << "(AnyPointer{x}, r, AnyPointer{rs}, c, AnyPointer{cs}, rows, cols"
          << (dact ? ", AnyPointer{pre}" : "") << "); }, " << ns << "::poison_shared},\n";
  }
  out << "struct AnyPointer {\n  const void* p;\n"
      << "  template <typename T>\n  operator T*() const { return "
         "static_cast<T*>(const_cast<void*>(p)); }\n"
      << "};\n"
      << "struct EmulatedKernel {\n  const char* name;\n"
      << "  void (*run)(const void*, unsigned char*, void*, unsigned char*, void*, int, int, "
      << "const void*);\n"
      << "  void (*poison_shared)();\n};\n"
      << "inline const EmulatedKernel kEmulatedKernels[] = {\n"
      << table.str() << "};\n";
  return out.str();
}

// The per-tensor quantize kernels, printed for the host from their IR; the
// 16-byte streaming store's twin also counts itself (host_wide_stores), so
// the tests see which column store path ran.
std::string quantize_kernels() {
  std::ostringstream out, table;
  const auto variants = fp8c::emulation::emulated_quantize_variants();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    fp8c::KernelSource k = fp8c::emit_cuda(variants[i]);
    k.source = fp8c::cuda::print(*k.ir, true);
    replace_body(k.source, "inline void ir_store_cs(uint4* p, uint4 v) {",
                 "host_check_aligned(p, 16); *p = v; ++host_wide_stores;");
    const std::string ns = std::string("q").append(std::to_string(i));
    emit(out, k, ns);
    const std::string in =
        variants[i].input == fp8c::ElemType::fp32 ? std::string("float") : ns + "::u16";
    table << "    {\"" << k.entry << "\", [](const QuantizeCall& a) { " << ns << "::" << k.entry
          << "(static_cast<const " << in << "*>(a.x), static_cast<const " << in
          << "*>(a.pre), a.scale, a.amax_in, a.rowwise, a.columnwise, a.amax_out, "
          << "a.dbias_partial, a.scale_out, a.rows, a.cols); }, " << ns << "::poison_shared},\n";
  }
  out << "struct EmulatedQuantizeKernel {\n  const char* name;\n"
      << "  void (*run)(const QuantizeCall&);\n  void (*poison_shared)();\n};\n"
      << "inline const EmulatedQuantizeKernel kEmulatedQuantizeKernels[] = {\n"
      << table.str() << "};\n";
  return out.str();
}

// The transposes, permutes and scale updates, printed for the host from their IR (the printer's
// host twins need no replacing; the shared arrays are hoisted as above).
std::string ir_kernels() {
  std::ostringstream out, table;
  for (int bytes : {1, 4}) {
    const fp8c::TransposeKernel k{bytes};
    const std::string ns = "t" + std::to_string(bytes);
    fp8c::KernelSource source = fp8c::emit_cuda(k);
    source.source = fp8c::cuda::print(*source.ir, true);
    emit(out, source, ns);
    table << "    {" << bytes << ", [](const void* in, void* out, int rows, int cols) { " << ns
          << "::" << source.entry << "(static_cast<const " << ns
          << "::" << (bytes == 1 ? "u8" : "u32") << "*>(in), static_cast<" << ns
          << "::" << (bytes == 1 ? "u8" : "u32") << "*>(out), rows, cols); }, " << ns
          << "::poison_shared},\n";
  }
  out << "struct EmulatedTranspose {\n  int element_bytes;\n"
      << "  void (*run)(const void*, void*, int, int);\n  void (*poison_shared)();\n};\n"
      << "inline const EmulatedTranspose kEmulatedTransposes[] = {\n"
      << table.str() << "};\n";
  std::ostringstream permutes;
  for (int bytes : {1, 2, 4}) {
    const fp8c::PermuteKernel k{bytes};
    const std::string ns = "p" + std::to_string(bytes);
    fp8c::KernelSource source = fp8c::emit_cuda(k);
    source.source = fp8c::cuda::print(*source.ir, true);
    emit(out, source, ns);
    permutes << "    {" << bytes
             << ", [](const void* in, void* out, int ranks, int outer, long long inner) { " << ns
             << "::" << source.entry << "(static_cast<const " << ns << "::u8*>(in), static_cast<"
             << ns << "::u8*>(out), ranks, outer, inner); }},\n";
  }
  std::ostringstream updates;
  const auto variants = fp8c::emulation::emulated_scale_update_variants();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const std::string ns = "s" + std::to_string(i);
    fp8c::KernelSource source = fp8c::emit_cuda(variants[i]);
    source.source = fp8c::cuda::print(*source.ir, true);
    emit(out, source, ns);
    updates << "    {\"" << source.entry
            << "\", [](float* h, const float* a, const float* p, float* s, "
            << "float* inv, const float* g) { " << ns << "::" << source.entry << "(h, a, p, s, inv"
            << (variants[i].guard > 0 ? ", g" : "") << "); }, " << ns << "::poison_shared},\n";
  }
  out << "struct EmulatedScaleUpdate {\n  const char* name;\n"
      << "  void (*run)(float*, const float*, const float*, float*, float*, const float*);\n"
      << "  void (*poison_shared)();\n};\n"
      << "inline const EmulatedScaleUpdate kEmulatedScaleUpdates[] = {\n"
      << updates.str() << "};\n";
  out << "struct EmulatedPermute {\n  int element_bytes;\n"
      << "  void (*run)(const void*, void*, int, int, long long);\n};\n"
      << "inline const EmulatedPermute kEmulatedPermutes[] = {\n"
      << permutes.str() << "};\n";
  return out.str();
}

// The epilogue kernels, printed for the host from their IR, with one entry
// point signature for all (the arguments cast to each kernel's own types).
std::string epilogue_kernels() {
  std::ostringstream out, table;
  const auto variants = fp8c::emulation::emulated_epilogue_variants();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const fp8c::EpilogueKernel& k = variants[i];
    const std::string ns = std::string("e").append(std::to_string(i));
    fp8c::KernelSource source = fp8c::emit_cuda(k);
    source.source = fp8c::cuda::print(*source.ir, true);
    emit(out, source, ns);
    const auto storage = [&](fp8c::ElemType t) {
      return t == fp8c::ElemType::fp32 ? std::string("float")
                                       : ns + (fp8c::is_fp8(t) ? "::u8" : "::u16");
    };
    const std::string in = storage(k.input), out_t = storage(k.output);
    table << "    {\"" << source.entry << "\", [](const EpilogueCall& a) { " << ns
          << "::" << source.entry << "(static_cast<const " << in << "*>(a.x), static_cast<const "
          << in << "*>(a.bias), static_cast<const " << in << "*>(a.pre), a.scale, static_cast<"
          << out_t << "*>(a.out), static_cast<" << in
          << "*>(a.pre_out), a.amax, a.dbias_partial, a.rows, a.cols); }, " << ns
          << "::poison_shared},\n";
  }
  out << "struct EmulatedEpilogue {\n  const char* name;\n"
      << "  void (*run)(const EpilogueCall&);\n  void (*poison_shared)();\n};\n"
      << "inline const EmulatedEpilogue kEmulatedEpilogues[] = {\n"
        << table.str() << "};\n";
  return out.str();
}

// The dequantizes (kernel IR, printed for the host), in a file of their own:
// its test compiles them apart from the other IR kinds.
std::string dequantize_kernels() {
  std::ostringstream out, table;
  const auto variants = fp8c::emulation::emulated_dequantize_variants();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const std::string ns = std::string("d").append(std::to_string(i));
    fp8c::KernelSource source = fp8c::emit_cuda(variants[i]);
    source.source = fp8c::cuda::print(*source.ir, true);
    emit(out, source, ns);
    const std::string out_type =
        variants[i].output == fp8c::ElemType::fp32 ? "float" : ns + "::u16";
    table << "    {\"" << source.entry << "\", [](const DequantizeCall& a) { " << ns
          << "::" << source.entry << "(a.data, a.tensor_scale, a.block_scales, static_cast<"
          << out_type << "*>(a.out), a.amax, a.outer, a.inner, a.segments, a.segmented); }, " << ns
          << "::poison_shared},\n";
  }
  out << "struct DequantizeCall {\n  const unsigned char* data;\n  const float* tensor_scale;\n"
      << "  const unsigned char* block_scales;\n  void* out;\n  unsigned* amax;\n"
      << "  int outer, inner, segments, segmented;\n};\n"
      << "struct EmulatedDequantize {\n  const char* name;\n"
      << "  void (*run)(const DequantizeCall&);\n  void (*poison_shared)();\n};\n"
      << "inline const EmulatedDequantize kEmulatedDequantizes[] = {\n"
      << table.str() << "};\n";
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: emit_for_host BLOCK_QUANTIZE.inc QUANTIZE.inc IR_KERNELS.inc "
                 "EPILOGUE.inc DEQUANTIZE.inc\n";
    return 2;
  }
  try {
    write_file(argv[1], block_quantize_kernels());
    write_file(argv[2], quantize_kernels());
    write_file(argv[3], ir_kernels());
    write_file(argv[4], epilogue_kernels());
    write_file(argv[5], dequantize_kernels());
  } catch (const std::exception& e) {
    std::cerr << "emit_for_host: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
