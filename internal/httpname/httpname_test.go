package httpname

import "testing"

func TestValid(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"X-Tenant", true},
		{"x_tenant.v2~!#$%&'*+^`|", true},
		{"", false},
		{"X Tenant", false},
		{"X-Tenant:", false},
		{"X-Ténant", false},
		{"X-Tenant\r\n", false},
	} {
		if got := Valid(c.s); got != c.want {
			t.Errorf("Valid(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}
