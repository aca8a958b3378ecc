// File helpers that fail with one clear InputError line and never leave half-written files.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace streamrl::core {

// Whole file as bytes. Throws InputError naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Writes to "<path>.tmp.<pid>" then renames over `path`, so readers see the old or the new file,
// never a torn one. Creates parent directories. Throws RuntimeFailure on I/O errors.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Replaces directory `dst` by `src` (a fully written sibling directory) as atomically as POSIX
// allows: the old directory is renamed aside, `src` renamed in, then the old one removed.
void replace_directory(const std::filesystem::path& src, const std::filesystem::path& dst);

}  // namespace streamrl::core
