// A process id that is surely gone, for the tests of what killed runs leave behind.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

namespace canvas::test {

// A child's that exited and was reaped (0 or less when fork failed).
inline pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace canvas::test
