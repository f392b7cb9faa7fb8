#include "tests/dsl/support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include "tests/test_paths.hpp"

namespace fp8c {
void PrintTo(const Spec& spec, std::ostream* out) {
  *out << "\n" << explain_spec(spec);
}
}  // namespace fp8c

namespace fp8c::test {
namespace fs = std::filesystem;

std::string fp8c_binary() {
  return ::fp8c::testing::built_path(FP8C_BINARY);
}
std::string malformed_dir() {
  return ::fp8c::testing::source_path("tests/malformed");
}
std::string examples_dir() {
  return ::fp8c::testing::examples_dir();
}

namespace {

// Removes the process's scratch folders when it exits (some hold 10 MB files).
struct ScratchFolders {
  std::vector<fs::path> dirs;
  ~ScratchFolders() {
    std::error_code ignored;
    for (const auto& dir : dirs) fs::remove_all(dir, ignored);
  }
};

}  // namespace

std::string scratch_dir(const std::string& name) {
  static ScratchFolders folders;
  const fs::path dir =
      fs::path(FP8C_TEST_SCRATCH) / (name + "." + std::to_string(static_cast<long>(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  folders.dirs.push_back(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<std::string> list_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string stem(const std::string& path) {
  return fs::path(path).stem().string();
}

std::string Expectation::str() const {
  return std::to_string(line) + ":" + std::to_string(col) + ": " + severity + ": " + message;
}

bool MalformedFile::expects_errors() const {
  return std::any_of(expectations.begin(), expectations.end(),
                     [](const Expectation& e) { return e.severity == "error"; });
}

bool MalformedFile::expects_warnings() const {
  return std::any_of(expectations.begin(), expectations.end(),
                     [](const Expectation& e) { return e.severity == "warning"; });
}

namespace {

// "LINE:COL: SEVERITY: MESSAGE"
std::optional<Expectation> parse_expectation(std::string_view s) {
  Expectation e;
  std::size_t i = 0;
  const auto number = [&](std::uint32_t& out) {
    const std::size_t start = i;
    std::uint64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - start < 9) v = v * 10 + (s[i++] - '0');
    out = static_cast<std::uint32_t>(v);
    return i > start && v > 0;
  };
  if (!number(e.line) || i >= s.size() || s[i++] != ':') return std::nullopt;
  if (!number(e.col) || s.substr(i, 2) != ": ") return std::nullopt;
  i += 2;
  const std::size_t colon = s.find(": ", i);
  if (colon == std::string_view::npos) return std::nullopt;
  e.severity = std::string(s.substr(i, colon - i));
  if (e.severity != "error" && e.severity != "warning" && e.severity != "note") return std::nullopt;
  e.message = std::string(s.substr(colon + 2));
  if (e.message.empty()) return std::nullopt;
  return e;
}

}  // namespace

MalformedFile load_malformed(const std::string& path) {
  MalformedFile file;
  file.path = path;
  file.text = read_file(path);
  std::size_t pos = 0;
  while (pos < file.text.size() && file.text[pos] == '#') {
    std::size_t end = file.text.find('\n', pos);
    if (end == std::string::npos) end = file.text.size();
    std::string_view line(file.text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    constexpr std::string_view kExpect = "# expect: ";
    constexpr std::string_view kArch = "# arch: ";
    if (line.substr(0, kExpect.size()) == kExpect) {
      if (auto e = parse_expectation(line.substr(kExpect.size())))
        file.expectations.push_back(*e);
      else
        file.header_problems.push_back("bad expectation: " + std::string(line));
    } else if (line.substr(0, kArch.size()) == kArch) {
      file.arch = std::string(line.substr(kArch.size()));
    } else if (line.substr(0, 7) == "#expect" || line.substr(0, 8) == "# expect" ||
               line.substr(0, 5) == "#arch" || line.substr(0, 6) == "# arch") {
      file.header_problems.push_back("misspelled header line: " + std::string(line));
    }
    pos = end + 1;
  }
  if (file.expectations.empty()) file.header_problems.push_back("no `# expect:` line");
  return file;
}

std::string describe(const SourceFile& file, const Diagnostic& d) {
  static constexpr const char* kSeverity[] = {"error", "warning", "note"};
  const auto lc = file.line_col(d.where.begin);
  return std::to_string(lc.line) + ":" + std::to_string(lc.col) + ": " +
         kSeverity[static_cast<int>(d.severity)] + ": " + d.message;
}

std::vector<std::string> describe_all(const SourceFile& file, const Diagnostics& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics.all()) out.push_back(describe(file, d));
  return out;
}

std::vector<std::string> messages(const Diagnostics& diagnostics) {
  static constexpr const char* kSeverity[] = {"error", "warning", "note"};
  std::vector<std::string> out;
  for (const auto& d : diagnostics.all())
    out.push_back(std::string(kSeverity[static_cast<int>(d.severity)]) + ": " + d.message);
  return out;
}

namespace {

// Length of a valid UTF-8 sequence at s[i], 0 if there is none. Written
// independently of dsl/prescan.cpp so that the test does not trust it.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  std::uint32_t min = 0;
  std::uint32_t code = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80, code = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800, code = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000, code = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (b(i + k) & 0x3F);
  }
  if (code < min || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view line) {
  std::string out(line);
  for (std::size_t i = 0; i < out.size();) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(out, i);
      if (n == 0) out[i++] = '?';
      i += n;
      continue;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7F) out[i] = '?';
    ++i;
  }
  return out;
}

CommandResult run_fp8c(const std::vector<std::string>& args, double timeout_s) {
  static std::atomic<int> counter{0};
  const std::string base = fs::path(FP8C_TEST_SCRATCH).string() + "/run." +
                           std::to_string(static_cast<long>(::getpid())) + "." +
                           std::to_string(counter++);
  fs::create_directories(FP8C_TEST_SCRATCH);
  const std::string out_path = base + ".out";
  const std::string err_path = base + ".err";
  const std::string binary = fp8c_binary();

  std::vector<std::string> argv_storage{binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  CommandResult run;
  int wstatus = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > timeout_s && !run.timed_out) {
      run.timed_out = true;
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -WTERMSIG(wstatus);
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return run;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::string check_rendering(const std::vector<std::string>& lines, std::size_t at,
                            const std::string& path, const SourceFile& source,
                            const Expectation& expected) {
  if (at + 3 > lines.size())
    return "stderr ends before the diagnostic " + expected.str() + " is fully shown";
  const std::string header = path + ":" + expected.str();
  if (lines[at] != header) return "header is\n  " + lines[at] + "\nexpected\n  " + header;

  // The echoed line: the whole source line, or a 160-byte window that starts
  // 80 bytes before the caret when the line is longer.
  std::string_view line = source.line_text(expected.line);
  std::size_t caret = expected.col - 1;
  if (caret > line.size()) return "column " + std::to_string(expected.col) + " is past the line";
  std::string prefix;
  if (line.size() > 160) {
    const std::size_t start = caret > 80 ? caret - 80 : 0;
    if (start > 0) prefix = "...";
    line = line.substr(start, 160);
    caret -= start;
  }
  const std::string echo = "  " + prefix + printable(line);
  if (lines[at + 1] != echo) return "echoed line is\n" + lines[at + 1] + "\nexpected\n" + echo;
  for (char c : lines[at + 1])
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7F)
      return "echoed line holds a control character";

  // The caret line: indentation that mirrors the line's tabs, '^' at the
  // column, then '~' no further than the line's end.
  std::string indent = "  " + std::string(prefix.size(), ' ');
  for (std::size_t i = 0; i < caret; ++i) indent += line[i] == '\t' ? '\t' : ' ';
  const std::string& caret_line = lines[at + 2];
  if (caret_line.compare(0, indent.size(), indent) != 0 || caret_line.size() <= indent.size() ||
      caret_line[indent.size()] != '^')
    return "caret line\n" + caret_line + "\ndoes not put '^' at column " +
           std::to_string(expected.col) + "; expected\n" + indent + "^";
  const std::string tail = caret_line.substr(indent.size() + 1);
  if (tail.find_first_not_of('~') != std::string::npos)
    return "caret line has more than '~' after the '^': " + caret_line;
  if (!tail.empty() && caret + 1 + tail.size() > line.size())
    return "the '~' run goes past the end of the line: " + caret_line;
  return {};
}

LineCol position_of(std::string_view text, std::string_view needle, std::size_t from) {
  const std::size_t at = text.find(needle, from);
  if (at == std::string_view::npos) throw std::runtime_error("not found: " + std::string(needle));
  LineCol lc{1, 1};
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++lc.line;
      lc.col = 1;
    } else {
      ++lc.col;
    }
  }
  return lc;
}

}  // namespace fp8c::test
