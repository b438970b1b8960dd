// A libtorch program measured with torchscan's C++ API: a small conv net, one forward and one
// backward pass, counted with module scopes named the way Python's torchscan names them
// (`Sequential`, `Sequential.0`, ...), then the peak CPU memory of the same step.
//
// Prints one JSON object: {"flops": FlopReport, "memory": MemoryStats}.
// Build and run: see examples/cpp/Makefile and docs/cpp.md.

#include <iostream>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "torchscan/torchscan.h"

namespace nn = torch::nn;

int main() {
  try {
    torch::manual_seed(0);
    nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                         nn::Conv2d(nn::Conv2dOptions(8, 16, 3).stride(2).groups(2)), nn::ReLU(),
                         nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)), nn::Flatten(), nn::Linear(16, 10));
    model->train();
    auto x = torch::randn({2, 3, 16, 16});

    // One training step: forward through every layer under its scope, then backward.
    auto step = [&](torchscan::Counter* counter) {
      torch::Tensor y = x;
      {
        std::unique_ptr<torchscan::Scope> root;
        if (counter) root = std::make_unique<torchscan::Scope>(*counter, "Sequential");
        size_t index = 0;
        for (auto& layer : *model) {
          std::unique_ptr<torchscan::Scope> scope;
          if (counter) scope = std::make_unique<torchscan::Scope>(*counter, "Sequential." + std::to_string(index));
          y = layer.forward(y);
          ++index;
        }
      }
      y.mean().backward();
    };

    torchscan::Counter counter;
    step(&counter);
    std::string flops = counter.report();

    model->zero_grad();
    std::string memory = torchscan::measure_peak_memory([&] { step(nullptr); });

    std::cout << "{\"flops\": " << flops << ", \"memory\": " << memory << "}" << std::endl;
    return 0;
  } catch (const torchscan::Error& e) {
    std::cerr << "torchscan error: " << e.what() << std::endl;
    return 1;
  }
}
