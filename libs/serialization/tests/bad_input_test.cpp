#include <courier/serialization.hpp>
