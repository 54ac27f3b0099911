// The main() of every collective binary: MB_SPEC names the plug-in (set by CMake).
#include "spec.hpp"

int main(int argc, char** argv) { return meshbench::collectives::run(meshbench::collectives::MB_SPEC(), argc, argv); }
