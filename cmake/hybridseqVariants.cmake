# hybridseq_add_variants(<target> HEADER <file.hpp> [NAMESPACE <ns>] SPECS <Name>=<spec.json> ...)
#
# Generates, at build time, a header of named model types from architecture specs
# (docs/specs.md) and adds it to <target>: `#include <file.hpp>` gives `ns::Name` (a model
# class) and `ns::Name_options()` (its Options with the spec's depth, vocabulary, tying and
# dropout). The header is regenerated when a spec changes; a spec that makes no sense fails
# the build with hybridseq-spec's message naming the key and value.
function(hybridseq_add_variants target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "HEADER;NAMESPACE" "SPECS")
  if(NOT arg_HEADER OR NOT arg_SPECS)
    message(FATAL_ERROR "hybridseq_add_variants(${target}): HEADER and SPECS are required")
  endif()
  if(NOT arg_NAMESPACE)
    set(arg_NAMESPACE variants)
  endif()
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${target}_variants")
  set(header "${dir}/${arg_HEADER}")
  set(args "")
  set(files "")
  foreach(item IN LISTS arg_SPECS)
    string(FIND "${item}" "=" eq)
    if(eq LESS 1)
      message(FATAL_ERROR "hybridseq_add_variants(${target}): '${item}' is not Name=spec.json")
    endif()
    string(SUBSTRING "${item}" 0 ${eq} name)
    math(EXPR from "${eq} + 1")
    string(SUBSTRING "${item}" ${from} -1 file)
    get_filename_component(file "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND args "${name}=@${file}")
    list(APPEND files "${file}")
  endforeach()
  add_custom_command(OUTPUT "${header}"
                     COMMAND "${CMAKE_COMMAND}" -E make_directory "${dir}"
                     COMMAND hybridseq::spec header --namespace ${arg_NAMESPACE} --output "${header}" ${args}
                     DEPENDS ${files} hybridseq::spec
                     COMMENT "hybridseq: generating ${arg_HEADER} from architecture specs" VERBATIM)
  target_sources(${target} PRIVATE "${header}")
  target_include_directories(${target} PRIVATE "${dir}")
endfunction()
