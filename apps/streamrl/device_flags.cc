#include "commands.h"

namespace streamrl::cli {

void add_device_flags(CLI::App* app, DeviceFlags* flags) {
  app->add_option("--device", flags->device, "cpu, cuda or cuda:N")->capture_default_str();
  app->add_option("--dtype", flags->dtype,
                  "Weights on CUDA: auto (bfloat16), float32 or bfloat16; the CPU is float32")
      ->capture_default_str();
}

}  // namespace streamrl::cli
