#include "streamrl/core/fs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "streamrl/core/errors.h"

namespace streamrl::core {
namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError("file not found: " + path.string());
  if (fs::is_directory(path, ec))
    throw InputError("expected a file, got a directory: " + path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open " + path.string() + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw RuntimeFailure("cannot write " + tmp.string() + ": " + std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out)
      throw RuntimeFailure("write failed for " + tmp.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp);
    throw RuntimeFailure("cannot rename " + tmp.string() + " to " + path.string() + ": " +
                         ec.message());
  }
}

void replace_directory(const fs::path& src, const fs::path& dst) {
  fs::path old = dst;
  old += ".old." + std::to_string(::getpid());
  std::error_code ec;
  bool had_old = fs::exists(dst);
  if (had_old) fs::rename(dst, old);
  fs::rename(src, dst, ec);
  if (ec) {
    if (had_old) fs::rename(old, dst);
    throw RuntimeFailure("cannot move " + src.string() + " to " + dst.string() + ": " +
                         ec.message());
  }
  if (had_old) fs::remove_all(old);
}

}  // namespace streamrl::core
