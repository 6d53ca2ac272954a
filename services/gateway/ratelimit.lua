-- keelson token bucket: one atomic rate-limit decision per call.
--
-- The gateway loads this script once (SCRIPT LOAD) and calls it with
-- EVALSHA; the unit test services/gateway/tests/test_gateway_ratelimit_lua.c
-- runs the same bytes (CMake embeds this file into both).
--
-- KEYS[1]  the bucket: a hash {s = tokens scaled by the period in us,
--          t = time of the last refill in us}
-- ARGV[1]  capacity: most tokens the bucket holds (an integer >= 1)
-- ARGV[2]  refill: tokens added per period (an integer >= 1)
-- ARGV[3]  period in microseconds (an integer >= 1)
-- ARGV[4]  cost: tokens this request takes (1 <= cost <= capacity)
-- ARGV[5]  optional: now in microseconds; without it the clock is Redis
--          TIME, the only clock every gateway replica shares. (For managed
--          Redis that refuses TIME in scripts; see docs/configuration.md.)
--
-- Returns {allowed (1/0), remaining whole tokens, retry_after_ms (0 when
-- allowed), reset_ms (time until the bucket is full again)}.
--
-- All arithmetic is on integers below 2^53, where Lua's doubles are exact:
-- tokens are counted in units of 1/period_us, so a refill adds exactly
-- elapsed_us * refill units and a client that waits the retry-after it was
-- given always finds its token (no 0.3 + 0.7 < 1 surprises).
if redis.replicate_commands then
        redis.replicate_commands() -- Redis 3.2-4.x: needed before TIME; a no-op later
end

local LIMIT = 9007199254740992 -- 2^53
local MARGIN_MS = 1000         -- expiry beyond the time to refill from empty

local function int_arg(i, lo, hi)
        local v = tonumber(ARGV[i])
        if v == nil or v ~= math.floor(v) or v < lo or v > hi then
                return nil
        end
        return v
end

-- floor(a / b) and ceil(a / b) for integers 0 <= a < 2^53, b >= 1, corrected
-- for the rounding of the division.
local function div_floor(a, b)
        local q = math.floor(a / b)
        while q * b > a do q = q - 1 end
        while (q + 1) * b <= a do q = q + 1 end
        return q
end

local function div_ceil(a, b)
        local q = div_floor(a, b)
        if q * b < a then q = q + 1 end
        return q
end

local capacity = int_arg(1, 1, LIMIT)
local refill = int_arg(2, 1, LIMIT)
local period = int_arg(3, 1, LIMIT)
local cost = int_arg(4, 1, LIMIT)
if capacity == nil or refill == nil or period == nil or cost == nil or cost > capacity
    or capacity * period >= LIMIT then
        return redis.error_reply("ERR ratelimit: bad arguments")
end

local now
if ARGV[5] ~= nil and ARGV[5] ~= "" then
        now = int_arg(5, 0, LIMIT - 1)
        if now == nil then
                return redis.error_reply("ERR ratelimit: bad now")
        end
else
        local t = redis.call("TIME")
        now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local full = capacity * period
local state = redis.call("HMGET", KEYS[1], "s", "t")
local s = tonumber(state[1])
local last = tonumber(state[2])
if s == nil or last == nil or s < 0 or s > full then
        s = full -- no bucket (or a corrupt one): a full bucket
        last = now
end

-- Refill. A clock that stands still or goes back adds nothing, and last
-- never moves back, so no replica's clock can mint tokens.
if now > last then
        local elapsed = now - last
        if elapsed >= div_ceil(full - s, refill) then
                s = full -- long idle: full, never more (and no overflow)
        else
                s = s + elapsed * refill
        end
        last = now
end

local need = cost * period
local allowed = 0
local retry_us = 0
if s >= need then
        s = s - need
        allowed = 1
else
        retry_us = div_ceil(need - s, refill)
end
local reset_us = div_ceil(full - s, refill)

redis.call("HSET", KEYS[1], "s", s, "t", last)
redis.call("PEXPIRE", KEYS[1], div_ceil(div_ceil(full, refill), 1000) + MARGIN_MS)
return {allowed, div_floor(s, period), div_ceil(retry_us, 1000), div_ceil(reset_us, 1000)}
