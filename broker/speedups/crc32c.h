/* CRC-32C (the polynomial of google_crc32c) for the compiled modules that check or write journal records
   (publish.pyx, replayframes.pyx): the SSE 4.2 crc32 instruction on x86-64 CPUs that have it, else slicing-by-8
   tables. Each module that includes this has its own copy of the state: call broker_crc32c_init() once at import.
   broker_crc32c_hw may be cleared to test the table path where the CPU has the instruction. */
#ifndef BROKER_CRC32C_H
#define BROKER_CRC32C_H

#include <stdint.h>
#include <string.h>

static uint32_t broker_crc32c_table[8][256];
/* Whether broker_crc32c_extend uses the crc32 instruction (set by broker_crc32c_init). */
static int broker_crc32c_hw = 0;

static void broker_crc32c_init(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    broker_crc32c_hw = __builtin_cpu_supports("sse4.2");
#endif
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        broker_crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = broker_crc32c_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = broker_crc32c_table[0][c & 0xff] ^ (c >> 8);
            broker_crc32c_table[t][i] = c;
        }
    }
}

/* The same with the SSE 4.2 crc32 instruction (CRC-32C in hardware, 8 bytes per instruction), on x86-64
   CPUs that have it (chosen once at import: broker_crc32c_hw). */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2")))
static uint32_t broker_crc32c_extend_hw(uint32_t crc, const uint8_t *p, size_t len) {
    uint64_t c = (uint32_t)~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
#endif

/* Continue a CRC-32C (as google_crc32c.extend) over len bytes. */
static uint32_t broker_crc32c_extend(uint32_t crc, const uint8_t *p, size_t len) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (broker_crc32c_hw) return broker_crc32c_extend_hw(crc, p, len);
#endif
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        lo ^= crc;
        crc = broker_crc32c_table[7][lo & 0xff] ^ broker_crc32c_table[6][(lo >> 8) & 0xff]
            ^ broker_crc32c_table[5][(lo >> 16) & 0xff] ^ broker_crc32c_table[4][lo >> 24]
            ^ broker_crc32c_table[3][hi & 0xff] ^ broker_crc32c_table[2][(hi >> 8) & 0xff]
            ^ broker_crc32c_table[1][(hi >> 16) & 0xff] ^ broker_crc32c_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) crc = broker_crc32c_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}


#endif
