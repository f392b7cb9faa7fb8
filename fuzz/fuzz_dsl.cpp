// libFuzzer target for the front end: whatever the bytes, check_source must
// return (with diagnostics or a Spec) without crashing, hanging or tripping
// ASan/UBSan. For inputs that check, it also holds the language's promises:
// fmt is idempotent, a formatted file checks to the same Spec, and explain's
// output checks to the same Spec. A broken promise aborts, which libFuzzer
// reports as a crash with the input saved.

#include <cstdio>
#include <cstdlib>

#include "fp8c/dsl.hpp"

namespace {

void fail(const char* what, const std::string& text) {
  std::fprintf(stderr, "fuzz_dsl: %s\n--- input ---\n%s\n", what, text.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const fp8c::SourceFile file("fuzz.fp8", text);
  fp8c::CheckResult result = fp8c::check_source(file);
  const std::string rendered = result.diagnostics.render(file);
  if (result.spec.has_value() == result.diagnostics.has_errors())
    fail("a Spec must come back exactly when there are no errors", text);
  for (const auto& d : result.diagnostics.all())
    if (d.where.begin > text.size()) fail("diagnostic past the end of the file", text);

  fp8c::Diagnostics format_diagnostics;
  const auto formatted = fp8c::format_source(file, format_diagnostics);
  if (!formatted) return 0;
  const fp8c::SourceFile formatted_file("fuzz.fp8", *formatted);
  fp8c::Diagnostics again_diagnostics;
  const auto again = fp8c::format_source(formatted_file, again_diagnostics);
  if (!again) fail("formatted output does not parse", text);
  if (*again != *formatted) fail("fmt is not idempotent", text);

  if (!result.spec) return 0;
  const fp8c::CheckResult reformatted = fp8c::check_source(formatted_file);
  if (!reformatted.spec || !(*reformatted.spec == *result.spec))
    fail("the formatted file checks to a different Spec", text);
  const fp8c::SourceFile explained("explain.fp8", fp8c::explain_spec(*result.spec));
  const fp8c::CheckResult from_explain = fp8c::check_source(explained);
  if (!from_explain.spec || !(*from_explain.spec == *result.spec))
    fail("explain's output checks to a different Spec", text);
  return 0;
}
