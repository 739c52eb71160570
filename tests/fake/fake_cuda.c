/*
 * fake_cuda.c - placeholder, replaced by the fake driver (see tests/unit/CMakeLists.txt).
 */
int cuInit(unsigned int flags);
int cuInit(unsigned int flags) { (void)flags; return 0; }
