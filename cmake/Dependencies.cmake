# Dependency discovery: every dependency is a Debian package, nothing is downloaded.
find_package(Torch REQUIRED)
# A CUDA libtorch registers its CUDA backend when libtorch_cuda.so loads, and nothing of ours
# references it by symbol: keep a linker that defaults to --as-needed (Ubuntu's) from dropping it.
if(TARGET torch_cuda)
  set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:--no-as-needed")
endif()
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)

# Debian's cpp-httplib is a compiled library whose class layouts depend on the feature macros its
# pkg-config file exports (OpenSSL, zlib, brotli); using it through pkg-config keeps them in step.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
add_library(streamrl_httplib INTERFACE)
target_link_libraries(streamrl_httplib INTERFACE PkgConfig::HTTPLIB Threads::Threads)
add_library(streamrl_cli11 INTERFACE)
target_include_directories(streamrl_cli11 SYSTEM INTERFACE ${CLI11_INCLUDE_DIR})

if(STREAMRL_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
