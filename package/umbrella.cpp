// libfp8c.so is the static parts of fp8c linked whole (package/CMakeLists.txt);
// CMake needs at least one source of its own for a library, and this is it.
