// SPDX-License-Identifier: MIT
// ofstream: std::ofstream writes, seekp back and past the end, then appends.
//
// usage: ofstream PATH
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

static std::uint64_t rng = 7;

static std::uint64_t next()
{
	std::uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int fail(const char *what)
{
	std::cerr << "ofstream: " << what << " failed\n";
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::cerr << "usage: ofstream PATH\n";
		return 2;
	}
	std::vector<double> field(60000);
	for (auto &x : field)
		x = static_cast<double>(next() >> 11) / 9007199254740992.0;
	{
		std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
		if (!out)
			return fail("open");
		out.write(reinterpret_cast<const char *>(field.data()),
			  static_cast<std::streamsize>(field.size() * sizeof(double)));
		for (int i = 0; i < 5000; i++)
			out << "step " << i << ' ' << next() << '\n';
		out.seekp(100000);
		out << "OVERWRITTEN IN THE MIDDLE";
		out.seekp(0, std::ios::end);
		out.seekp(200000, std::ios::cur); // past the end: a hole
		out.write(reinterpret_cast<const char *>(field.data()), 70000);
		out.flush();
		out.seekp(8);
		out.put('#');
		out.close();
		if (!out)
			return fail("write");
	}
	{
		std::ofstream app(argv[1], std::ios::binary | std::ios::app);
		if (!app)
			return fail("open for append");
		for (int i = 0; i < 3000; i++)
			app << "appended " << i << '\n';
		app.close();
		if (!app)
			return fail("append");
	}
	return 0;
}
