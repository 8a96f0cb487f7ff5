// openmp_wait: Ferry's programs run with OpenMP's idle threads asleep (OMP_WAIT_POLICY=PASSIVE) unless the
// user chose a policy: on the CPU, oneDNN's OpenMP threads share the cores with AdamW's and the copy streams'.
#pragma once

namespace ferry {

// Run first in main(): libgomp reads the policy once, before main, so a process that finds it unset sets it
// and executes itself again (same arguments, same environment otherwise). Returns when the policy was already
// set, or when the re-execution failed (the run then goes on with libgomp's default).
void run_with_sleeping_openmp_threads(char** argv);

}  // namespace ferry
