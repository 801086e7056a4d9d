-- The bare app's primary-key lookup of a vaccine (bench/ceiling.py), with the same random ids as vaccine_get.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/vaccines/" .. common.random_vaccine())
end
