// Precompiled header shared by every target that uses libtorch (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>

#include <nlohmann/json.hpp>
