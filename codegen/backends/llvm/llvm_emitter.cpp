#include "codegen/backends/llvm/llvm_emitter.hpp"

#include <llvm/ADT/SmallString.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>

namespace fp8c::llvm_backend {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
// PTX ISA 8.0: the first with sm_90a; ptxas of CUDA 12 and 13 read it.
constexpr const char* kFeatures = "+ptx80";

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("LLVM backend: " + what);
}

void initialize_nvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    // No loop strength reduction in code generation: on the unrolled
    // multi-row loops (the backward epilogue's eight rows of x and of z) it
    // turns each row's address into a 64-bit induction pointer of its own,
    // which ptxas keeps live across the loop (the dgelu dbias epilogue went
    // from 127 to 166 registers, one block per SM instead of two). ptxas
    // forms its own addressing from base + offset. The option is LLVM's
    // (TargetPassConfig's -disable-lsr); this module holds its own LLVM, so
    // setting it touches no other user of LLVM in the process.
    const char* argv[] = {"fp8c-llvm", "-disable-lsr"};
    llvm::cl::ParseCommandLineOptions(2, argv, "fp8c LLVM backend", nullptr, nullptr);
  });
}

std::unique_ptr<llvm::TargetMachine> target_machine(const std::string& cpu) {
  initialize_nvptx();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (target == nullptr) throw std::runtime_error("LLVM backend: no NVPTX target: " + error);
  // Asked first: given an unknown GPU, LLVM prints a warning and builds for
  // its default one.
  const std::unique_ptr<llvm::MCSubtargetInfo> subtarget(
      target->createMCSubtargetInfo(kTriple, "sm_90a", kFeatures));
  if (!subtarget || !subtarget->isCPUStringValid(cpu))
    fail("LLVM's NVPTX target does not know the GPU '" + cpu + "' (write e.g. sm_90a)");
  llvm::TargetOptions options;  // AllowFPOpFusion = Standard: no contraction (ir.hpp)
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(kTriple, cpu, kFeatures, options, std::nullopt, std::nullopt,
                                  llvm::CodeGenOptLevel::Aggressive));
  if (!tm) throw std::runtime_error("LLVM backend: no target machine for " + cpu);
  return tm;
}

unsigned address_space(ir::Space s) {
  return s == ir::Space::shared ? 3 : s == ir::Space::global ? 1 : 0;
}

class Emitter {
 public:
  Emitter(llvm::LLVMContext& ctx, llvm::Module& m) : ctx_(ctx), m_(m), b_(ctx) {}

  llvm::Function* kernel(const ir::Kernel& k) {
    std::vector<llvm::Type*> params;
    for (const auto& p : k.params) params.push_back(type(p.type));
    auto* fn_type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, k.name, m_);
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (std::size_t i = 0; i < k.params.size(); ++i) {
      const ir::Param& p = k.params[i];
      llvm::Argument* a = fn_->getArg(static_cast<unsigned>(i));
      a->setName(p.name);
      if (p.type.is_pointer() && p.restrict_) a->addAttr(llvm::Attribute::NoAlias);
      if (p.type.is_pointer() && p.type.read_only) a->addAttr(llvm::Attribute::ReadOnly);
      values_[p.name] = a;
      if (p.type.is_pointer() && p.type.read_only && p.restrict_) invariant_.insert(p.name);
    }
    for (const auto& s : k.shared) {
      auto* array = llvm::ArrayType::get(type(s.element), static_cast<std::uint64_t>(s.count));
      auto* g = new llvm::GlobalVariable(m_, array, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::UndefValue::get(array), k.name + "." + s.name,
                                         nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      g->setAlignment(llvm::Align(static_cast<std::uint64_t>(s.align)));
      values_[s.name] = g;
    }
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry_);
    block(k.body);
    if (!b_.GetInsertBlock()->getTerminator()) b_.CreateRetVoid();
    annotate(k);
    return fn_;
  }

 private:
  llvm::Type* scalar(ir::Scalar s) {
    switch (s) {
      case ir::Scalar::pred:
        return b_.getInt1Ty();
      case ir::Scalar::u8:
        return b_.getInt8Ty();
      case ir::Scalar::u16:
        return b_.getInt16Ty();
      case ir::Scalar::u32:
      case ir::Scalar::i32:
        return b_.getInt32Ty();
      case ir::Scalar::u64:
      case ir::Scalar::i64:
        return b_.getInt64Ty();
      case ir::Scalar::f32:
        return b_.getFloatTy();
    }
    return nullptr;
  }

  llvm::Type* type(const ir::Type& t) {
    if (t.is_pointer()) return llvm::PointerType::get(ctx_, address_space(t.space));
    if (t.lanes > 1)
      return llvm::FixedVectorType::get(scalar(t.scalar), static_cast<unsigned>(t.lanes));
    return scalar(t.scalar);
  }

  // nvvm.annotations: the thread count the kernel is built for (PTX
  // .maxntid, which also lets ptxas budget registers as __launch_bounds__
  // does) and the blocks per SM to fit (.minnctapersm).
  void annotate(const ir::Kernel& k) {
    llvm::NamedMDNode* md = m_.getOrInsertNamedMetadata("nvvm.annotations");
    const auto add = [&](const char* key, int value) {
      llvm::Metadata* ops[] = {
          llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, key),
          llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<std::uint32_t>(value)))};
      md->addOperand(llvm::MDNode::get(ctx_, ops));
    };
    add("kernel", 1);
    add("maxntidx", k.max_threads);
    if (k.min_blocks > 0) add("minctasm", k.min_blocks);
  }

  llvm::Value* slot(const std::string& name, const ir::Type& t) {
    auto it = locals_.find(name);
    if (it != locals_.end()) return it->second;
    // Every local gets its slot in the entry block, where mem2reg/SROA
    // promote it to SSA values.
    llvm::IRBuilder<> at_entry(entry_, entry_->begin());
    llvm::AllocaInst* a = at_entry.CreateAlloca(type(t), nullptr, name);
    locals_[name] = a;
    local_types_[name] = t;
    return a;
  }

  // Whether loads through `pointer` read data no one writes while the
  // kernel runs: its root is a read-only restrict parameter.
  bool invariant(const ir::Expr& pointer) {
    const ir::ExprNode* n = &*pointer;
    while (n->op == ir::Op::index || n->op == ir::Op::reinterpret) n = &*n->args[0];
    return n->op == ir::Op::var && invariant_.count(n->name) > 0;
  }

  llvm::Value* inline_asm(llvm::Type* result, const char* text, const char* constraints,
                          const std::vector<llvm::Value*>& args, bool side_effects = false) {
    std::vector<llvm::Type*> types;
    for (llvm::Value* v : args) types.push_back(v->getType());
    auto* fty = llvm::FunctionType::get(result, types, false);
    return b_.CreateCall(llvm::InlineAsm::get(fty, text, constraints, side_effects), args);
  }

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, const std::vector<llvm::Type*>& types,
                         const std::vector<llvm::Value*>& args) {
    return b_.CreateIntrinsic(id, types, args);
  }

  llvm::Value* expr(const ir::Expr& e) {
    const ir::ExprNode& n = *e;
    const ir::Type& t = n.type;
    switch (n.op) {
      case ir::Op::constant:
        if (t.is_float())
          return llvm::ConstantFP::get(b_.getFloatTy(), static_cast<double>(n.float_value));
        return llvm::ConstantInt::get(type(t), static_cast<std::uint64_t>(n.int_value),
                                      t.is_signed());
      case ir::Op::var: {
        if (auto it = values_.find(n.name); it != values_.end()) return it->second;
        auto it = locals_.find(n.name);
        if (it == locals_.end()) fail("a read of " + n.name + " before its declaration");
        return b_.CreateLoad(type(t), it->second, n.name);
      }
      case ir::Op::special:
        return b_.CreateIntrinsic(special_id(n.special), {}, {});
      case ir::Op::select:
        return b_.CreateSelect(expr(n.args[0]), expr(n.args[1]), expr(n.args[2]));
      case ir::Op::convert:
        return convert(expr(n.args[0]), n.args[0].type(), t);
      case ir::Op::bitcast:
        return b_.CreateBitCast(expr(n.args[0]), type(t));
      case ir::Op::index: {
        const ir::Type pointee = t.pointee();
        llvm::Value* i = expr(n.args[1]);
        const ir::Type& it = n.args[1].type();
        i = it.scalar_bits() < 64 ? (it.is_signed() ? b_.CreateSExt(i, b_.getInt64Ty())
                                                    : b_.CreateZExt(i, b_.getInt64Ty()))
                                  : i;
        return b_.CreateGEP(type(pointee), expr(n.args[0]), i);
      }
      case ir::Op::reinterpret:
        return expr(n.args[0]);  // opaque pointers: the same address
      case ir::Op::load: {
        llvm::LoadInst* l = b_.CreateAlignedLoad(
            type(t), expr(n.args[0]), llvm::Align(static_cast<std::uint64_t>(t.bytes())));
        if (invariant(n.args[0]))
          l->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
        return l;
      }
      case ir::Op::address:
        return b_.CreatePtrToInt(expr(n.args[0]), b_.getInt64Ty());
      case ir::Op::lane:
        return b_.CreateExtractElement(expr(n.args[0]), static_cast<std::uint64_t>(n.lane));
      case ir::Op::make_vector: {
        llvm::Value* v = llvm::PoisonValue::get(type(t));
        for (std::size_t i = 0; i < n.args.size(); ++i)
          v = b_.CreateInsertElement(v, expr(n.args[i]), i);
        return v;
      }
      case ir::Op::fma:
        return intrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()},
                         {expr(n.args[0]), expr(n.args[1]), expr(n.args[2])});
      case ir::Op::shfl_xor:
        return intrinsic(
            llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
            {b_.getInt32(0xFFFFFFFFu), expr(n.args[0]), expr(n.args[1]), b_.getInt32(0x1F)});
      case ir::Op::pack_e4m3x2:
      case ir::Op::pack_e5m2x2:
        // The first source goes to the high byte: (hi, lo), as the CUDA printer.
        return inline_asm(b_.getInt16Ty(),
                          n.op == ir::Op::pack_e4m3x2 ? "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;"
                                                      : "cvt.rn.satfinite.e5m2x2.f32 $0, $1, $2;",
                          "=h,f,f", {expr(n.args[1]), expr(n.args[0])});
      case ir::Op::f16_to_f32:
        return inline_asm(b_.getFloatTy(), "cvt.f32.f16 $0, $1;", "=f,h", {expr(n.args[0])});
      case ir::Op::f32_to_f16:
        return inline_asm(b_.getInt16Ty(), "cvt.rn.f16.f32 $0, $1;", "=h,f", {expr(n.args[0])});
      case ir::Op::f32_to_bf16:
        return inline_asm(b_.getInt16Ty(), "cvt.rn.bf16.f32 $0, $1;", "=h,f", {expr(n.args[0])});
      case ir::Op::pack_bf16x2:
      case ir::Op::pack_f16x2:
        // (hi, lo), as the CUDA printer: the first source goes to the high half.
        return inline_asm(b_.getInt32Ty(),
                          n.op == ir::Op::pack_bf16x2 ? "cvt.rn.bf16x2.f32 $0, $1, $2;"
                                                      : "cvt.rn.f16x2.f32 $0, $1, $2;",
                          "=r,f,f", {expr(n.args[1]), expr(n.args[0])});
      case ir::Op::unpack_e4m3x2:
      case ir::Op::unpack_e5m2x2:
        return inline_asm(b_.getInt32Ty(),
                          n.op == ir::Op::unpack_e4m3x2 ? "cvt.rn.f16x2.e4m3x2 $0, $1;"
                                                        : "cvt.rn.f16x2.e5m2x2 $0, $1;",
                          "=r,h", {expr(n.args[0])});
      case ir::Op::byte_perm:
        return inline_asm(b_.getInt32Ty(), "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r",
                          {expr(n.args[0]), expr(n.args[1]), expr(n.args[2])});
      case ir::Op::clz:
        return intrinsic(llvm::Intrinsic::ctlz, {b_.getInt32Ty()},
                         {expr(n.args[0]), b_.getFalse()});
      case ir::Op::tanh_approx:
        return inline_asm(b_.getFloatTy(), "tanh.approx.f32 $0, $1;", "=f,f", {expr(n.args[0])});
      case ir::Op::ex2_approx:
        return inline_asm(b_.getFloatTy(), "ex2.approx.f32 $0, $1;", "=f,f", {expr(n.args[0])});
      case ir::Op::div_approx:
        return inline_asm(b_.getFloatTy(), "div.approx.f32 $0, $1, $2;", "=f,f,f",
                          {expr(n.args[0]), expr(n.args[1])});
      case ir::Op::max_u16x2:
        return inline_asm(b_.getInt32Ty(), "max.u16x2 $0, $1, $2;", "=r,r,r",
                          {expr(n.args[0]), expr(n.args[1])});
      case ir::Op::bit_not:
        return b_.CreateNot(expr(n.args[0]));
      case ir::Op::neg:
        return t.is_float() ? b_.CreateFNeg(expr(n.args[0])) : b_.CreateNeg(expr(n.args[0]));
      default:
        return binary(n);
    }
  }

  llvm::Value* binary(const ir::ExprNode& n) {
    const ir::Type& t = n.args[0].type();
    llvm::Value* a = expr(n.args[0]);
    llvm::Value* c = expr(n.args[1]);
    const bool f = t.is_float(), s = t.is_signed();
    switch (n.op) {
      case ir::Op::add:
        return f ? b_.CreateFAdd(a, c) : b_.CreateAdd(a, c);
      case ir::Op::sub:
        return f ? b_.CreateFSub(a, c) : b_.CreateSub(a, c);
      case ir::Op::mul:
        return f ? b_.CreateFMul(a, c) : b_.CreateMul(a, c);
      case ir::Op::div:
        return f ? b_.CreateFDiv(a, c) : s ? b_.CreateSDiv(a, c) : b_.CreateUDiv(a, c);
      case ir::Op::rem:
        return s ? b_.CreateSRem(a, c) : b_.CreateURem(a, c);
      case ir::Op::min:
        return intrinsic(f   ? llvm::Intrinsic::minnum
                         : s ? llvm::Intrinsic::smin
                             : llvm::Intrinsic::umin,
                         {a->getType()}, {a, c});
      case ir::Op::max:
        return intrinsic(f   ? llvm::Intrinsic::maxnum
                         : s ? llvm::Intrinsic::smax
                             : llvm::Intrinsic::umax,
                         {a->getType()}, {a, c});
      case ir::Op::bit_and:
        return b_.CreateAnd(a, c);
      case ir::Op::bit_or:
        return b_.CreateOr(a, c);
      case ir::Op::bit_xor:
        return b_.CreateXor(a, c);
      case ir::Op::shl:
        return b_.CreateShl(a, c);
      case ir::Op::shr:
        return s ? b_.CreateAShr(a, c) : b_.CreateLShr(a, c);
      case ir::Op::lt:
        return f ? b_.CreateFCmpOLT(a, c) : s ? b_.CreateICmpSLT(a, c) : b_.CreateICmpULT(a, c);
      case ir::Op::le:
        return f ? b_.CreateFCmpOLE(a, c) : s ? b_.CreateICmpSLE(a, c) : b_.CreateICmpULE(a, c);
      case ir::Op::gt:
        return f ? b_.CreateFCmpOGT(a, c) : s ? b_.CreateICmpSGT(a, c) : b_.CreateICmpUGT(a, c);
      case ir::Op::ge:
        return f ? b_.CreateFCmpOGE(a, c) : s ? b_.CreateICmpSGE(a, c) : b_.CreateICmpUGE(a, c);
      case ir::Op::eq:
        return f ? b_.CreateFCmpOEQ(a, c) : b_.CreateICmpEQ(a, c);
      case ir::Op::ne:
        // C's != is true when either side is NaN: unordered-or-unequal.
        return f ? b_.CreateFCmpUNE(a, c) : b_.CreateICmpNE(a, c);
      default:
        fail("an expression it cannot lower");
    }
  }

  llvm::Value* convert(llvm::Value* v, const ir::Type& from, const ir::Type& to) {
    llvm::Type* dst = type(to);
    if (from.is_float()) return to.is_signed() ? b_.CreateFPToSI(v, dst) : b_.CreateFPToUI(v, dst);
    if (to.is_float())
      return from.is_signed() || from.is_pred()
                 ? (from.is_pred() ? b_.CreateUIToFP(v, dst) : b_.CreateSIToFP(v, dst))
                 : b_.CreateUIToFP(v, dst);
    if (from.scalar_bits() > to.scalar_bits()) return b_.CreateTrunc(v, dst);
    if (from.scalar_bits() < to.scalar_bits())
      return from.is_signed() ? b_.CreateSExt(v, dst) : b_.CreateZExt(v, dst);
    return v;  // same width: the same bits
  }

  static llvm::Intrinsic::ID special_id(ir::Special s) {
    switch (s) {
      case ir::Special::tid_x:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x;
      case ir::Special::ctaid_x:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x;
      case ir::Special::ctaid_y:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y;
      case ir::Special::ctaid_z:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z;
      case ir::Special::ntid_x:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x;
      case ir::Special::nctaid_x:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x;
      case ir::Special::nctaid_y:
        return llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y;
    }
    return llvm::Intrinsic::not_intrinsic;
  }

  // After a return, statements that follow in the same block cannot run;
  // they go to a fresh block with no predecessor, which LLVM removes.
  void ensure_open_block() {
    if (b_.GetInsertBlock()->getTerminator())
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "dead", fn_));
  }

  void block(const std::vector<ir::Stmt>& stmts) {
    for (const auto& s : stmts) {
      ensure_open_block();
      stmt(s);
    }
  }

  void streaming_store(const ir::Stmt& s) {
    const ir::Type& t = s.value.type();
    llvm::Value* p = expr(s.pointer);
    llvm::Value* v = expr(s.value);
    if (t == ir::kU16) {
      inline_asm(b_.getVoidTy(), "st.global.cs.u16 [$0], $1;", "l,h,~{memory}", {p, v}, true);
    } else if (t == ir::kU32) {
      inline_asm(b_.getVoidTy(), "st.global.cs.u32 [$0], $1;", "l,r,~{memory}", {p, v}, true);
    } else if (t == ir::kU32x2) {
      inline_asm(b_.getVoidTy(), "st.global.cs.v2.u32 [$0], {$1, $2};", "l,r,r,~{memory}",
                 {p, b_.CreateExtractElement(v, std::uint64_t{0}),
                  b_.CreateExtractElement(v, std::uint64_t{1})},
                 true);
    } else if (t == ir::kU32x4) {
      std::vector<llvm::Value*> args = {p};
      for (std::uint64_t i = 0; i < 4; ++i) args.push_back(b_.CreateExtractElement(v, i));
      inline_asm(b_.getVoidTy(), "st.global.cs.v4.u32 [$0], {$1, $2, $3, $4};",
                 "l,r,r,r,r,~{memory}", args, true);
    } else {
      fail("no streaming store of " + ir::to_string(t));
    }
  }

  void stmt(const ir::Stmt& s) {
    switch (s.kind) {
      case ir::StmtKind::declare: {
        llvm::Value* a = slot(s.name, s.type);
        if (s.value.defined()) b_.CreateStore(expr(s.value), a);
        return;
      }
      case ir::StmtKind::assign: {
        auto it = locals_.find(s.name);
        if (it == locals_.end()) fail("an assignment to " + s.name + " before its declaration");
        b_.CreateStore(expr(s.value), it->second);
        return;
      }
      case ir::StmtKind::store:
        if (s.streaming) {
          streaming_store(s);
        } else {
          const ir::Type& t = s.value.type();
          b_.CreateAlignedStore(expr(s.value), expr(s.pointer),
                                llvm::Align(static_cast<std::uint64_t>(t.bytes())));
        }
        return;
      case ir::StmtKind::atomic_max:
        b_.CreateAtomicRMW(llvm::AtomicRMWInst::UMax, expr(s.pointer), expr(s.value),
                           llvm::Align(4), llvm::AtomicOrdering::Monotonic);
        return;
      case ir::StmtKind::if_: {
        auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
        auto* else_bb = s.else_body.empty() ? nullptr : llvm::BasicBlock::Create(ctx_, "else", fn_);
        auto* join = llvm::BasicBlock::Create(ctx_, "endif", fn_);
        b_.CreateCondBr(expr(s.cond), then_bb, else_bb ? else_bb : join);
        b_.SetInsertPoint(then_bb);
        block(s.body);
        if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(join);
        if (else_bb) {
          b_.SetInsertPoint(else_bb);
          block(s.else_body);
          if (!b_.GetInsertBlock()->getTerminator()) b_.CreateBr(join);
        }
        b_.SetInsertPoint(join);
        return;
      }
      case ir::StmtKind::for_: {
        llvm::Value* i = slot(s.name, ir::kI32);
        b_.CreateStore(expr(s.begin), i);
        auto* cond = llvm::BasicBlock::Create(ctx_, "for.cond", fn_);
        auto* body = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
        auto* exit = llvm::BasicBlock::Create(ctx_, "for.end", fn_);
        b_.CreateBr(cond);
        b_.SetInsertPoint(cond);
        llvm::Value* iv = b_.CreateLoad(b_.getInt32Ty(), i, s.name);
        b_.CreateCondBr(b_.CreateICmpSLT(iv, expr(s.end)), body, exit);
        b_.SetInsertPoint(body);
        block(s.body);
        if (!b_.GetInsertBlock()->getTerminator()) {
          llvm::Value* next = b_.CreateAdd(b_.CreateLoad(b_.getInt32Ty(), i), expr(s.step));
          b_.CreateStore(next, i);
          llvm::BranchInst* latch = b_.CreateBr(cond);
          if (s.unroll > 0) latch->setMetadata(llvm::LLVMContext::MD_loop, loop_metadata(s.unroll));
        }
        b_.SetInsertPoint(exit);
        return;
      }
      case ir::StmtKind::sync_threads:
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
        return;
      case ir::StmtKind::sync_warp:
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_bar_warp_sync, {}, {b_.getInt32(0xFFFFFFFFu)});
        return;
      case ir::StmtKind::return_:
        b_.CreateRetVoid();
        // What follows a return in its block is dead but must still be
        // well-formed IR: it goes into a block of its own, which the
        // optimizer removes.
        b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "after.return", fn_));
        return;
      case ir::StmtKind::comment:
        return;
    }
  }

  // !llvm.loop: unroll fully (1) or by a count (n), as #pragma unroll [n].
  llvm::MDNode* loop_metadata(int unroll) {
    llvm::SmallVector<llvm::Metadata*, 3> ops;
    ops.push_back(nullptr);  // the self reference
    if (unroll == 1) {
      ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.full")}));
    } else {
      llvm::Metadata* count[] = {
          llvm::MDString::get(ctx_, "llvm.loop.unroll.count"),
          llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<std::uint32_t>(unroll)))};
      ops.push_back(llvm::MDNode::get(ctx_, count));
    }
    llvm::MDNode* node = llvm::MDNode::getDistinct(ctx_, ops);
    node->replaceOperandWith(0, node);
    return node;
  }

  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::map<std::string, llvm::Value*> values_;  // parameters and shared arrays
  std::map<std::string, llvm::Value*> locals_;  // allocas
  std::map<std::string, ir::Type> local_types_;
  std::set<std::string> invariant_;
};

// LLVM's diagnostics go here, not to stderr: errors are thrown after the
// step that raised them; warnings and remarks (a loop an unroll request
// could not unroll: NVRTC is silent about those too) are dropped.
struct Diagnostics {
  std::string errors;
  static void handle(const llvm::DiagnosticInfo* info, void* self) {
    if (info->getSeverity() != llvm::DS_Error) return;
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::DiagnosticPrinterRawOStream printer(os);
    info->print(printer);
    auto& errors = static_cast<Diagnostics*>(self)->errors;
    errors += (errors.empty() ? "" : "; ") + os.str();
  }
  void check(const std::string& step, const std::string& kernel) const {
    if (!errors.empty())
      throw std::runtime_error("LLVM backend: " + step + " of " + kernel + " failed: " + errors);
  }
};

struct Built {
  std::unique_ptr<Diagnostics> diagnostics;
  std::unique_ptr<llvm::LLVMContext> ctx;
  std::unique_ptr<llvm::Module> module;
  std::unique_ptr<llvm::TargetMachine> tm;
};

Built build(const ir::Kernel& kernel, const std::string& cpu) {
  Built out;
  out.tm = target_machine(cpu);
  out.diagnostics = std::make_unique<Diagnostics>();
  out.ctx = std::make_unique<llvm::LLVMContext>();
  out.ctx->setDiagnosticHandlerCallBack(&Diagnostics::handle, out.diagnostics.get());
  out.module = std::make_unique<llvm::Module>(kernel.name, *out.ctx);
  out.module->setTargetTriple(kTriple);
  out.module->setDataLayout(out.tm->createDataLayout());
  Emitter(*out.ctx, *out.module).kernel(kernel);
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::verifyModule(*out.module, &os))
    throw std::runtime_error("LLVM backend: the module for " + kernel.name +
                             " does not verify: " + os.str());
  return out;
}

void optimize(Built& built) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(built.tm.get());
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*built.module, mam);
  built.diagnostics->check("optimizing", built.module->getName().str());
}

}  // namespace

std::string emit_llvm_ir(const ir::Kernel& kernel, const std::string& cpu, bool optimized) {
  Built built = build(kernel, cpu);
  if (optimized) optimize(built);
  std::string text;
  llvm::raw_string_ostream os(text);
  built.module->print(os, nullptr);
  return os.str();
}

std::string emit_ptx(const ir::Kernel& kernel, const std::string& cpu) {
  Built built = build(kernel, cpu);
  optimize(built);
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (built.tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw std::runtime_error("LLVM backend: NVPTX cannot emit PTX for " + cpu);
  pm.run(*built.module);
  built.diagnostics->check("code generation", kernel.name);
  return std::string(ptx.str());
}

}  // namespace fp8c::llvm_backend
