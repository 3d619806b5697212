# Encodes the text-format default rules as a binary ckptscan.v1.RuleSet with protoc, so the
# binary embeds bytes that parse in microseconds instead of text that takes milliseconds.
#
#   cmake -DPROTOC=<protoc> -DPROTO_DIR=<dir> -DINPUT=<textproto> -DOUTPUT=<binpb> -P encode_rules.cmake
foreach(var PROTOC PROTO_DIR INPUT OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "encode_rules.cmake: -D${var}=... is required")
  endif()
endforeach()
execute_process(
  COMMAND ${PROTOC} --encode=ckptscan.v1.RuleSet -I${PROTO_DIR} ckptscan/v1/rules.proto
  INPUT_FILE ${INPUT}
  OUTPUT_FILE ${OUTPUT}
  RESULT_VARIABLE rc
  ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "protoc could not encode ${INPUT}: ${err}")
endif()
