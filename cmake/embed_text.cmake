# Writes OUTPUT, a C++ file defining `const char NAME[]` in NAMESPACE with the text of INPUT.
# Run as a script: cmake -DINPUT=... -DOUTPUT=... -DNAME=... -DNAMESPACE=... -P embed_text.cmake
file(READ "${INPUT}" content)
string(FIND "${content}" ")tandem_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )tandem_embed\"")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_text.cmake; do not edit.\nnamespace ${NAMESPACE} {\nextern const char ${NAME}[];\nconst char ${NAME}[] = R\"tandem_embed(${content})tandem_embed\";\n}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
