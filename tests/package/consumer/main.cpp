// Joins the job from the environment and all_reduces rank+1 across every rank.
#include <distrun/comm/process_group.hpp>
#include <distrun/core/error.hpp>
#include <iostream>

int main() {
  try {
    auto pg = distrun::ProcessGroup::init();
    auto t = distrun::Tensor::empty({3}, distrun::DType::Int64);
    for (int i = 0; i < 3; ++i) t.data_as<int64_t>()[i] = pg->rank() + 1;
    pg->backend().all_reduce(t, {});
    std::cout << "rank " << pg->rank() << " sum " << t.data_as<int64_t>()[0] << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << std::endl;
    return distrun::exit_code(e);
  }
}
