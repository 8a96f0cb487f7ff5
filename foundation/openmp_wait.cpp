// openmp_wait: OMP_WAIT_POLICY set before libgomp starts, by executing /proc/self/exe again.
#include "foundation/openmp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace ferry {

void run_with_sleeping_openmp_threads(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;  // the user's choice, or our own second start
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OMP_WAIT_POLICY");  // no re-execution: this process keeps libgomp's default
}

}  // namespace ferry
