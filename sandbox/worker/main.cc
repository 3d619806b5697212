// ckptscan-worker: see sandbox/worker/worker.h. _exit, not return: no static destructor or stdio
// flush may run inside the jail.
#include <unistd.h>

#include "sandbox/worker/worker.h"

int main(int argc, char** argv) { ::_exit(ckptscan::sandbox::WorkerMain(argc, argv)); }
