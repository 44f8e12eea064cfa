// The translation unit that builds the test drivers' shared precompiled header (see
// tandem_test_pch in the top-level CMakeLists.txt); it has no code of its own.
