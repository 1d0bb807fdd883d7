// SPDX-License-Identifier: BSL-1.0
// Courier serialization: chunked, zero-copy archives for every standard and user type.
// See libs/serialization/README.md for the wire format and the guarantees.
#pragma once

#include <courier/serialization/chunk.hpp>
#include <courier/serialization/deep_copy.hpp>
#include <courier/serialization/error.hpp>
#include <courier/serialization/file.hpp>
#include <courier/serialization/input_archive.hpp>
#include <courier/serialization/message.hpp>
#include <courier/serialization/output_archive.hpp>
#include <courier/serialization/polymorphic.hpp>
#include <courier/serialization/profile.hpp>
#include <courier/serialization/save_load.hpp>
#include <courier/serialization/serialize_buffer.hpp>
#include <courier/serialization/serializer.hpp>
#include <courier/serialization/traits.hpp>
#include <courier/serialization/types/containers.hpp>
#include <courier/serialization/types/pointers.hpp>
#include <courier/serialization/types/string.hpp>
#include <courier/serialization/types/utility.hpp>
#include <courier/serialization/types/vector.hpp>
