// Tries: reach the network with nothing a screen or an imports check can see: socket and
// connect are found in libc's symbol table from memcpy's address, and the kernel connects to a
// port on 127.0.0.1 where the test listens. Only the OS can stop it; a failed connection traps.
#include <math.h>
#include <stdint.h>
#include <string.h>

// Finding libc's functions without naming them anywhere the screen or the imports check looks:
// from the address of memcpy (which every kernel may use), walk back page by page to libc's ELF
// header, then read libc's dynamic symbol table as the loader does. Hand-written ELF records, so
// no system header is included.
struct Header {
    unsigned char ident[16];
    uint16_t type, machine;
    uint32_t version;
    uint64_t entry, phoff, shoff;
    uint32_t flags;
    uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct Segment {
    uint32_t type, flags;
    uint64_t offset, vaddr, paddr, filesz, memsz, align;
};
struct Dynamic {
    int64_t tag;
    uint64_t value;
};
struct Symbol {
    uint32_t name;
    unsigned char info, other;
    uint16_t shndx;
    uint64_t value, size;
};

// Names are spelled out letter by letter: a screen may read string literals too.
#define NAME(...) ((const char[]){__VA_ARGS__, 0})

static void* libc_function(const char* wanted) {
    uintptr_t page = (uintptr_t)(const void*)&memcpy & ~(uintptr_t)0xfff;
    const unsigned char* base = nullptr;
    for (int i = 0; i < (1 << 16) && base == nullptr; ++i, page -= 0x1000) {
        const unsigned char* h = (const unsigned char*)page;
        if (h[0] == 0x7f && h[1] == 'E' && h[2] == 'L' && h[3] == 'F') base = h;
    }
    if (base == nullptr) return nullptr;
    const Header* header = (const Header*)base;
    const Dynamic* dyn = nullptr;
    for (int i = 0; i < header->phnum; ++i) {
        const Segment* s = (const Segment*)(base + header->phoff + i * header->phentsize);
        if (s->type == 2) dyn = (const Dynamic*)(base + s->vaddr);  // PT_DYNAMIC
    }
    const Symbol* symbols = nullptr;
    const char* names = nullptr;
    for (; dyn != nullptr && dyn->tag != 0; ++dyn) {
        uintptr_t where = dyn->value < (uintptr_t)base ? (uintptr_t)base + dyn->value : dyn->value;
        if (dyn->tag == 6) symbols = (const Symbol*)where;  // DT_SYMTAB
        if (dyn->tag == 5) names = (const char*)where;      // DT_STRTAB
    }
    if (symbols == nullptr || names == nullptr || (const char*)symbols >= names) return nullptr;
    for (const Symbol* s = symbols; (const char*)(s + 1) <= names; ++s)
        if (s->value != 0 && strcmp(names + s->name, wanted) == 0) return (void*)(base + s->value);
    return nullptr;
}

typedef int (*Socket)(int, int, int);
typedef int (*Connect)(int, const void*, unsigned);

struct Address {
    uint16_t family;
    uint16_t port;  // big-endian
    uint8_t host[4];
    uint8_t zero[8];
};

static bool connected = false;

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    if (!connected) {
        connected = true;
        Socket make = (Socket)libc_function(NAME('s', 'o', 'c', 'k', 'e', 't'));
        Connect reach = (Connect)libc_function(NAME('c', 'o', 'n', 'n', 'e', 'c', 't'));
        if (make == nullptr || reach == nullptr) __builtin_trap();
        const uint16_t port = @PORT@;
        Address to = {2, (uint16_t)((port >> 8) | (port << 8)), {127, 0, 0, 1}, {0}};
        int s = make(2, 1, 0);  // AF_INET, SOCK_STREAM
        if (s < 0 || reach(s, &to, sizeof to) != 0) __builtin_trap();
    }
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t i = 0; i < d; ++i) {
            float g = x[t * 2 * d + i];
            out[t * d + i] = g / (1.0f + expf(-g)) * x[t * 2 * d + d + i];
        }
}
